// Package onnx reads the parts of an ONNX model file that a hand-written
// architecture needs: the graph's initializers (the weights) as named
// tensors, and its nodes (operator, inputs, outputs, attributes) so that
// constants folded into Constant nodes and hyper-parameters can be found.
// It does not run the graph.
//
// An ONNX file is one protobuf message, ModelProto. Only these fields are
// read (numbers from onnx.proto); everything else is skipped:
//
//	ModelProto   7 graph
//	GraphProto   1 node, 5 initializer
//	NodeProto    1 input, 2 output, 3 name, 4 op_type, 5 attribute
//	AttributeProto 1 name, 2 f, 3 i, 4 s, 5 t, 7 floats, 8 ints
//	TensorProto  1 dims, 2 data_type, 4 float_data, 5 int32_data,
//	             7 int64_data, 8 name, 9 raw_data, 14 data_location
//
// The file is parsed with protowire, so no generated code is needed.
// Tensors with raw_data are views of the file's bytes; typed repeated
// fields are re-encoded little-endian. Every length and size is checked
// against the bytes there are; a malformed file is a *FormatError, never
// a panic. External data (data_location = EXTERNAL) is refused.
package onnx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"

	"google.golang.org/protobuf/encoding/protowire"

	"fusion/engine/tensor"
)

// Limits on what Parse accepts.
const (
	MaxRank = 8
	// MaxFileSize caps Open's read.
	MaxFileSize = 4 << 30
)

// ErrMalformed is wrapped by every *FormatError.
var ErrMalformed = errors.New("onnx: malformed model")

// FormatError says where a file is malformed.
type FormatError struct {
	Where string // e.g. "initializer enc_p.emb.weight"
	Msg   string
}

func (e *FormatError) Error() string { return "onnx: " + e.Where + ": " + e.Msg }

// Unwrap makes errors.Is(err, ErrMalformed) hold.
func (e *FormatError) Unwrap() error { return ErrMalformed }

func malformed(where, format string, args ...any) error {
	return &FormatError{Where: where, Msg: fmt.Sprintf(format, args...)}
}

// Attribute is one attribute of a node; which fields are set depends on
// its kind (F and I for scalars, S for strings, T for a tensor, Floats and
// Ints for lists).
type Attribute struct {
	Name   string
	F      float32
	I      int64
	S      []byte
	T      *tensor.Tensor
	Floats []float32
	Ints   []int64
}

// Node is one operator of the graph.
type Node struct {
	Name    string
	OpType  string
	Inputs  []string
	Outputs []string
	Attrs   []Attribute
}

// Attr returns the attribute called name.
func (n *Node) Attr(name string) (Attribute, bool) {
	for _, a := range n.Attrs {
		if a.Name == name {
			return a, true
		}
	}
	return Attribute{}, false
}

// Model is what Parse read: the initializers in file order, by name, and
// the nodes in graph order.
type Model struct {
	Initializers []tensor.Tensor
	Nodes        []Node
	byName       map[string]int
}

// Initializer returns the initializer called name.
func (m *Model) Initializer(name string) (tensor.Tensor, bool) {
	i, ok := m.byName[name]
	if !ok {
		return tensor.Tensor{}, false
	}
	return m.Initializers[i], true
}

// Open reads and parses the file at path.
func Open(path string) (*Model, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	if fi.Size() > MaxFileSize {
		return nil, malformed(path, "file of %d bytes is over the %d-byte limit", fi.Size(), int64(MaxFileSize))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	return Parse(b)
}

// Parse reads a ModelProto. Tensors with raw_data alias b.
func Parse(b []byte) (*Model, error) {
	m := &Model{byName: map[string]int{}}
	var graph []byte
	err := fields(b, "model", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num == 7 && typ == protowire.BytesType {
			graph = v
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if graph == nil {
		return nil, malformed("model", "no graph")
	}
	err = fields(graph, "graph", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			n, err := parseNode(v)
			if err != nil {
				return err
			}
			m.Nodes = append(m.Nodes, n)
		case num == 5 && typ == protowire.BytesType:
			t, err := parseTensor(v, "initializer")
			if err != nil {
				return err
			}
			if _, dup := m.byName[t.Name]; dup {
				return malformed("initializer "+t.Name, "name used twice")
			}
			m.byName[t.Name] = len(m.Initializers)
			m.Initializers = append(m.Initializers, t)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// fields walks the fields of one message, giving each its number, wire
// type and either its bytes (BytesType) or its varint / fixed value.
func fields(b []byte, where string, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return malformed(where, "bad field tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		var (
			v []byte
			x uint64
		)
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var x32 uint32
			x32, n = protowire.ConsumeFixed32(b)
			x = uint64(x32)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return malformed(where, "field %d: %v", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// varints appends a repeated int64 field, packed (bytes) or not (varint).
func varints(dst []int64, typ protowire.Type, v []byte, x uint64, where string) ([]int64, error) {
	if typ == protowire.VarintType {
		return append(dst, int64(x)), nil
	}
	if typ != protowire.BytesType {
		return nil, malformed(where, "integer list of wire type %d", typ)
	}
	for len(v) > 0 {
		y, n := protowire.ConsumeVarint(v)
		if n < 0 {
			return nil, malformed(where, "packed integers: %v", protowire.ParseError(n))
		}
		dst = append(dst, int64(y))
		v = v[n:]
	}
	return dst, nil
}

// floats appends a repeated float field, packed (bytes) or not (fixed32).
func floats(dst []float32, typ protowire.Type, v []byte, x uint64, where string) ([]float32, error) {
	if typ == protowire.Fixed32Type {
		return append(dst, math.Float32frombits(uint32(x))), nil
	}
	if typ != protowire.BytesType || len(v)%4 != 0 {
		return nil, malformed(where, "float list of wire type %d and %d bytes", typ, len(v))
	}
	for i := 0; i < len(v); i += 4 {
		dst = append(dst, math.Float32frombits(binary.LittleEndian.Uint32(v[i:])))
	}
	return dst, nil
}

func parseNode(b []byte) (Node, error) {
	var n Node
	err := fields(b, "node", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			n.Inputs = append(n.Inputs, string(v))
		case 2:
			n.Outputs = append(n.Outputs, string(v))
		case 3:
			n.Name = string(v)
		case 4:
			n.OpType = string(v)
		case 5:
			a, err := parseAttr(v, "node "+n.Name)
			if err != nil {
				return err
			}
			n.Attrs = append(n.Attrs, a)
		}
		return nil
	})
	return n, err
}

func parseAttr(b []byte, where string) (Attribute, error) {
	var a Attribute
	err := fields(b, where+" attribute", func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		var err error
		switch num {
		case 1:
			a.Name = string(v)
		case 2:
			a.F = math.Float32frombits(uint32(x))
		case 3:
			a.I = int64(x)
		case 4:
			a.S = v
		case 5:
			if typ == protowire.BytesType {
				t, terr := parseTensor(v, where+" attribute "+a.Name)
				a.T, err = &t, terr
			}
		case 7:
			a.Floats, err = floats(a.Floats, typ, v, x, where+" attribute "+a.Name)
		case 8:
			a.Ints, err = varints(a.Ints, typ, v, x, where+" attribute "+a.Name)
		}
		return err
	})
	return a, err
}

// dataTypes maps TensorProto.DataType to the element types read here.
var dataTypes = map[int64]tensor.DType{
	1: tensor.F32, 2: tensor.U8, 3: tensor.I8, 4: tensor.U16, 5: tensor.I16,
	6: tensor.I32, 7: tensor.I64, 9: tensor.Bool, 10: tensor.F16,
	11: tensor.F64, 12: tensor.U32, 13: tensor.U64, 16: tensor.BF16,
}

func parseTensor(b []byte, where string) (tensor.Tensor, error) {
	var (
		t        tensor.Tensor
		dataType int64
		raw      []byte
		hasRaw   bool
		f32      []float32
		ints     []int64 // int32_data or int64_data
		external bool
	)
	err := fields(b, where, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		var err error
		switch num {
		case 1:
			t.Shape, err = varints(t.Shape, typ, v, x, where+" dims")
		case 2:
			dataType = int64(x)
		case 4:
			f32, err = floats(f32, typ, v, x, where+" float_data")
		case 5, 7:
			ints, err = varints(ints, typ, v, x, where+" integer data")
		case 8:
			t.Name = string(v)
		case 9:
			raw, hasRaw = v, true
		case 14:
			external = x == 1
		}
		return err
	})
	if err != nil {
		return t, err
	}
	if t.Name != "" {
		where += " " + t.Name
	}
	if external {
		return t, malformed(where, "external data is not supported")
	}
	if len(t.Shape) > MaxRank {
		return t, malformed(where, "rank %d over %d", len(t.Shape), MaxRank)
	}
	dt, ok := dataTypes[dataType]
	if !ok {
		return t, malformed(where, "unsupported data type %d", dataType)
	}
	t.DType = dt
	n, err := tensor.NumElements(t.Shape)
	if err != nil {
		return t, malformed(where, "%v", err)
	}
	size, err := dt.ByteSize(n)
	if err != nil {
		return t, malformed(where, "%v", err)
	}
	switch {
	case hasRaw:
		t.Data = raw
	case len(f32) > 0 && dt == tensor.F32:
		t.Data = make([]byte, 4*len(f32))
		for i, v := range f32 {
			binary.LittleEndian.PutUint32(t.Data[4*i:], math.Float32bits(v))
		}
	case len(ints) > 0 && (dt == tensor.I64 || dt == tensor.I32):
		w := int(dt.BlockBytes())
		t.Data = make([]byte, w*len(ints))
		for i, v := range ints {
			if w == 8 {
				binary.LittleEndian.PutUint64(t.Data[8*i:], uint64(v))
			} else {
				binary.LittleEndian.PutUint32(t.Data[4*i:], uint32(int32(v)))
			}
		}
	case n == 0:
	default:
		return t, malformed(where, "no data for %v of %d elements", dt, n)
	}
	if int64(len(t.Data)) != size {
		return t, malformed(where, "%d data bytes for %v of shape %v (%d bytes)", len(t.Data), dt, t.Shape, size)
	}
	return t, nil
}

// NodeInput returns the initializer that feeds input i of the node called
// node. Exporters name some weights after the module that owns them and
// others only by a number (e.g. "onnx::Conv_8168" for a convolution whose
// weight normalization was folded before export); the consuming node's
// name is then what says which weight it is.
func (m *Model) NodeInput(node string, i int) (tensor.Tensor, bool) {
	for k := range m.Nodes {
		n := &m.Nodes[k]
		if n.Name != node {
			continue
		}
		if i < 0 || i >= len(n.Inputs) {
			return tensor.Tensor{}, false
		}
		return m.Initializer(n.Inputs[i])
	}
	return tensor.Tensor{}, false
}
