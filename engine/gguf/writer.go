package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"fusion/engine/tensor"
	"fusion/internal/atomicfile"
)

// WriteTensor is a tensor to write: Shape outermost-first, Data exactly
// DType.ByteSize(elements) bytes in row-major order (for block types, the
// ggml blocks of each row in turn).
type WriteTensor struct {
	Name  string
	DType tensor.DType
	Shape []int64
	Data  []byte
}

// maxWriteName is ggml's GGML_MAX_NAME less the terminating NUL: llama.cpp
// refuses longer tensor names.
const maxWriteName = 63

// Write writes a GGUF v3 file: meta in the given order with their types
// preserved, then the tensor infos and the tensor data, each tensor aligned
// to general.alignment (from meta, a uint32 power of two; default 32).
func Write(w io.Writer, meta []KV, tensors []WriteTensor) error {
	align, err := checkMeta(meta)
	if err != nil {
		return err
	}
	infos, err := planTensors(tensors, align)
	if err != nil {
		return err
	}
	e := &encoder{w: bufio.NewWriterSize(w, 1<<16)}
	e.bytes([]byte(magic))
	e.u32(3)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(meta)))
	for _, kv := range meta {
		e.str(kv.Key)
		e.u32(uint32(kv.Value.typ))
		e.value(kv.Value)
	}
	for _, ti := range infos {
		e.str(ti.name)
		e.u32(uint32(len(ti.dims)))
		for _, d := range ti.dims {
			e.u64(d)
		}
		e.u32(uint32(ti.typ))
		e.u64(ti.offset)
	}
	e.pad(align)
	for _, t := range tensors {
		e.bytes(t.Data)
		e.pad(align)
	}
	if e.err != nil {
		return fmt.Errorf("gguf: writing: %w", e.err)
	}
	if err := e.w.Flush(); err != nil {
		return fmt.Errorf("gguf: writing: %w", err)
	}
	return nil
}

// WriteFile writes a GGUF file to path through a temporary file in the
// same directory, renamed into place once complete.
func WriteFile(path string, meta []KV, tensors []WriteTensor) error {
	if err := atomicfile.Write(path, func(w io.Writer) error { return Write(w, meta, tensors) }); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	return nil
}

func checkMeta(meta []KV) (int, error) {
	align := defaultAlignment
	seen := make(map[string]bool, len(meta))
	for _, kv := range meta {
		if kv.Key == "" || len(kv.Key) > maxKeyLen {
			return 0, fmt.Errorf("gguf: metadata key %q: empty or longer than %d bytes", kv.Key, maxKeyLen)
		}
		if seen[kv.Key] {
			return 0, fmt.Errorf("gguf: duplicate metadata key %q", kv.Key)
		}
		seen[kv.Key] = true
		if err := checkValue(kv.Value, 0); err != nil {
			return 0, fmt.Errorf("gguf: metadata %q: %w", kv.Key, err)
		}
		if kv.Key == KeyAlignment {
			a, ok := kv.Value.x.(uint32)
			if !ok || a == 0 || a&(a-1) != 0 || a > maxAlignment {
				return 0, fmt.Errorf("gguf: %s must be a uint32 power of two up to %d, got %v", KeyAlignment, maxAlignment, kv.Value)
			}
			align = int(a)
		}
	}
	return align, nil
}

func checkValue(v Value, depth int) error {
	if !v.set {
		return errors.New("value is not set")
	}
	if v.typ != TypeArray {
		if scalarType(v.x) != v.typ {
			return fmt.Errorf("value %T does not match type %s", v.x, v.typ)
		}
		return nil
	}
	if depth >= maxNesting {
		return fmt.Errorf("arrays nested deeper than %d", maxNesting)
	}
	if v.elem != TypeArray {
		return nil // typed by construction
	}
	for i, e := range v.x.([]Value) {
		if e.typ != TypeArray {
			return fmt.Errorf("element %d of an array of arrays is %s", i, e.typ)
		}
		if err := checkValue(e, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func planTensors(tensors []WriteTensor, align int) ([]tensorInfo, error) {
	infos := make([]tensorInfo, len(tensors))
	seen := make(map[string]bool, len(tensors))
	var offset uint64
	for i, t := range tensors {
		if t.Name == "" || len(t.Name) > maxWriteName {
			return nil, fmt.Errorf("gguf: tensor name %q: empty or longer than %d bytes", t.Name, maxWriteName)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("gguf: duplicate tensor %q", t.Name)
		}
		seen[t.Name] = true
		if len(t.Shape) == 0 || len(t.Shape) > maxDims {
			return nil, fmt.Errorf("gguf: tensor %q has %d dimensions, want 1 to %d", t.Name, len(t.Shape), maxDims)
		}
		typ, err := GGMLTypeOf(t.DType)
		if err != nil {
			return nil, fmt.Errorf("gguf: tensor %q: %w", t.Name, err)
		}
		n, err := tensor.NumElements(t.Shape)
		if err != nil {
			return nil, fmt.Errorf("gguf: tensor %q: %w", t.Name, err)
		}
		if row := t.Shape[len(t.Shape)-1]; row%int64(t.DType.BlockElems()) != 0 {
			return nil, fmt.Errorf("gguf: tensor %q: row of %d elements is not a multiple of the %v block size %d",
				t.Name, row, t.DType, t.DType.BlockElems())
		}
		size, err := t.DType.ByteSize(n)
		if err != nil {
			return nil, fmt.Errorf("gguf: tensor %q: %w", t.Name, err)
		}
		if int64(len(t.Data)) != size {
			return nil, fmt.Errorf("gguf: tensor %q: %d bytes of data, shape %v of %v needs %d", t.Name, len(t.Data), t.Shape, t.DType, size)
		}
		dims := make([]uint64, len(t.Shape))
		for j, d := range t.Shape {
			dims[len(t.Shape)-1-j] = uint64(d)
		}
		infos[i] = tensorInfo{name: t.Name, dims: dims, typ: typ, offset: offset, size: size}
		offset += uint64(alignUp(int(size), align))
	}
	return infos, nil
}

// encoder writes little-endian GGUF primitives; its first error sticks.
type encoder struct {
	w     *bufio.Writer
	n     int64
	err   error
	b     [8]byte
	zeros [512]byte // padding source
}

func (e *encoder) bytes(b []byte) {
	if e.err != nil {
		return
	}
	var n int
	n, e.err = e.w.Write(b)
	e.n += int64(n)
}

func (e *encoder) u8(v uint8) { e.bytes([]byte{v}) }

func (e *encoder) u16(v uint16) {
	binary.LittleEndian.PutUint16(e.b[:], v)
	e.bytes(e.b[:2])
}

func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.b[:], v)
	e.bytes(e.b[:4])
}

func (e *encoder) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.b[:], v)
	e.bytes(e.b[:8])
}

func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	e.bytes([]byte(s))
}

func (e *encoder) pad(align int) {
	if r := int(e.n % int64(align)); r != 0 {
		for n := align - r; n > 0; n -= min(n, len(e.zeros)) {
			e.bytes(e.zeros[:min(n, len(e.zeros))])
		}
	}
}

func (e *encoder) boolean(b bool) {
	if b {
		e.u8(1)
	} else {
		e.u8(0)
	}
}

// value writes v without its type tag.
func (e *encoder) value(v Value) {
	switch x := v.x.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	case bool:
		e.boolean(x)
	case string:
		e.str(x)
	default:
		e.array(v)
	}
}

func (e *encoder) array(v Value) {
	e.u32(uint32(v.elem))
	e.u64(uint64(v.Len()))
	switch a := v.x.(type) {
	case []uint8:
		e.bytes(a)
	case []int8:
		for _, x := range a {
			e.u8(uint8(x))
		}
	case []uint16:
		for _, x := range a {
			e.u16(x)
		}
	case []int16:
		for _, x := range a {
			e.u16(uint16(x))
		}
	case []uint32:
		for _, x := range a {
			e.u32(x)
		}
	case []int32:
		for _, x := range a {
			e.u32(uint32(x))
		}
	case []float32:
		for _, x := range a {
			e.u32(math.Float32bits(x))
		}
	case []uint64:
		for _, x := range a {
			e.u64(x)
		}
	case []int64:
		for _, x := range a {
			e.u64(uint64(x))
		}
	case []float64:
		for _, x := range a {
			e.u64(math.Float64bits(x))
		}
	case []bool:
		for _, x := range a {
			e.boolean(x)
		}
	case []string:
		for _, x := range a {
			e.str(x)
		}
	case []Value:
		for _, x := range a {
			e.array(x)
		}
	}
}
