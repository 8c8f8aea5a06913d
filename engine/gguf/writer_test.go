package gguf

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"fusion/engine/tensor"
)

// sampleMeta has one key of every scalar type, arrays of each, an empty
// array and a nested array.
func sampleMeta(t testing.TB) []KV {
	nested, err := ArrayOfArrays([]Value{Array([]int32{1, 2}), Array([]int32{}), Array([]int32{3})})
	if err != nil {
		t.Fatal(err)
	}
	return []KV{
		{KeyArchitecture, String("llama")},
		{"test.u8", Of(uint8(200))},
		{"test.i8", Of(int8(-100))},
		{"test.u16", Of(uint16(60000))},
		{"test.i16", Of(int16(-30000))},
		{"test.u32", Of(uint32(4000000000))},
		{"test.i32", Of(int32(-2000000000))},
		{"test.f32", Of(float32(1e-5))},
		{"test.bool", Of(true)},
		{"test.string", String("héllo\x00world")},
		{"test.u64", Of(uint64(math.MaxUint64))},
		{"test.i64", Of(int64(math.MinInt64))},
		{"test.f64", Of(math.Pi)},
		{"test.arr.u8", Array([]uint8{1, 2, 3})},
		{"test.arr.i8", Array([]int8{-1, 2})},
		{"test.arr.u16", Array([]uint16{1, 65535})},
		{"test.arr.i16", Array([]int16{-1, 2})},
		{"test.arr.u32", Array([]uint32{7})},
		{"test.arr.i32", Array([]int32{1, 3, 3, 4, 4})},
		{"test.arr.f32", Array([]float32{0.5, -2})},
		{"test.arr.bool", Array([]bool{true, false, true})},
		{"test.arr.string", Array([]string{"a", "", "Ġthe"})},
		{"test.arr.u64", Array([]uint64{1 << 40})},
		{"test.arr.i64", Array([]int64{-1 << 40})},
		{"test.arr.f64", Array([]float64{1.5})},
		{"test.arr.empty", Array([]string{})},
		{"test.arr.nested", nested},
	}
}

// sampleTensors has tensors of several types, shapes and sizes.
func sampleTensors(r *rand.Rand) []WriteTensor {
	mk := func(name string, dt tensor.DType, shape ...int64) WriteTensor {
		n, _ := tensor.NumElements(shape)
		size, _ := dt.ByteSize(n)
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		if dt.Quantized() || dt == tensor.F16 || dt == tensor.BF16 || dt == tensor.F32 {
			x := gaussian(r, int(n), 1)
			data, _ = Quantize(dt, x)
		}
		return WriteTensor{Name: name, DType: dt, Shape: shape, Data: data}
	}
	return []WriteTensor{
		mk("token_embd.weight", tensor.Q8_0, 10, 64),
		mk("blk.0.attn_norm.weight", tensor.F32, 64),
		mk("blk.0.attn_q.weight", tensor.Q4_K, 4, 256),
		mk("blk.0.ffn_down.weight", tensor.Q6_K, 2, 1, 256),
		mk("blk.0.ffn_up.weight", tensor.F16, 3, 5),
		mk("blk.0.ffn_gate.weight", tensor.BF16, 7),
		mk("blk.0.attn_v.weight", tensor.Q5_K, 2, 256),
		mk("blk.0.attn_k.weight", tensor.Q4_0, 1, 2, 3, 32),
		mk("ids", tensor.I32, 3),
	}
}

func writeSample(t testing.TB, meta []KV, tensors []WriteTensor) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, meta, tensors); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestWriteReadRoundTrip(t *testing.T) {
	meta := sampleMeta(t)
	tensors := sampleTensors(rand.New(rand.NewPCG(9, 10)))
	for _, align := range []uint32{0, 64, 1} {
		var m []KV
		m = append(m, meta...)
		want := 32
		if align != 0 {
			m = append(m, KV{KeyAlignment, Uint32(align)})
			want = int(align)
		}
		data := writeSample(t, m, tensors)
		f, err := Parse("sample", data)
		if err != nil {
			t.Fatalf("alignment %d: %v", align, err)
		}
		if f.Version != 3 || f.Alignment != want || f.DataOffset%int64(want) != 0 {
			t.Errorf("version %d alignment %d data offset %d", f.Version, f.Alignment, f.DataOffset)
		}
		if !reflect.DeepEqual(f.KV, m) {
			for i := range m {
				if i >= len(f.KV) || !reflect.DeepEqual(f.KV[i], m[i]) {
					t.Fatalf("metadata %d: read %#v, wrote %#v", i, f.KV[i], m[i])
				}
			}
			t.Fatalf("metadata: read %d entries, wrote %d", len(f.KV), len(m))
		}
		if len(f.Tensors) != len(tensors) {
			t.Fatalf("%d tensors read, %d written", len(f.Tensors), len(tensors))
		}
		for i, wt := range tensors {
			got := f.Tensors[i]
			if got.Name != wt.Name || got.DType != wt.DType || !reflect.DeepEqual(got.Shape, wt.Shape) || !bytes.Equal(got.Data, wt.Data) {
				t.Errorf("tensor %d: read %s %v %v (%d bytes), wrote %s %v %v (%d bytes)",
					i, got.Name, got.DType, got.Shape, len(got.Data), wt.Name, wt.DType, wt.Shape, len(wt.Data))
			}
			if cap(got.Data) != len(got.Data) {
				t.Errorf("tensor %q: view capacity %d exceeds its length %d", got.Name, cap(got.Data), len(got.Data))
			}
		}
		if tt, ok := f.Tensor("blk.0.attn_q.weight"); !ok || tt.Shape[1] != 256 {
			t.Errorf("Tensor lookup: %v %v", tt.Shape, ok)
		}
		if s, ok := f.Meta("test.string").AsString(); !ok || s != "héllo\x00world" {
			t.Errorf("Meta string = %q, %v", s, ok)
		}
		if _, ok := f.Meta("missing").AsString(); ok {
			t.Error("missing key reported present")
		}
	}
}

func TestOpenModes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	tensors := sampleTensors(rand.New(rand.NewPCG(11, 12)))
	if err := WriteFile(path, sampleMeta(t), tensors); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []LoadMode{LoadRead, LoadMmap} {
		f, err := Open(path, mode)
		if err != nil {
			t.Fatalf("%v: %v", mode, err)
		}
		for i, wt := range tensors {
			if !bytes.Equal(f.Tensors[i].Data, wt.Data) {
				t.Errorf("%v: tensor %q differs", mode, wt.Name)
			}
		}
		x, err := ToFloat32(f.Tensors[2])
		if err != nil || len(x) != 1024 {
			t.Errorf("%v: ToFloat32: %d values, %v", mode, len(x), err)
		}
		if err := f.Close(); err != nil {
			t.Errorf("%v: Close: %v", mode, err)
		}
	}
	if _, err := Open(filepath.Join(t.TempDir(), "absent.gguf"), LoadRead); err == nil {
		t.Error("Open of a missing file: no error")
	}
	if m, err := ParseLoadMode("mmap"); err != nil || m != LoadMmap {
		t.Errorf("ParseLoadMode(mmap) = %v, %v", m, err)
	}
	if _, err := ParseLoadMode("stream"); err == nil {
		t.Error("ParseLoadMode(stream): no error")
	}
}

func TestOpenErrorNamesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "broken.gguf")
	tensors := []WriteTensor{{Name: "w", DType: tensor.F32, Shape: []int64{8}, Data: make([]byte, 32)}}
	data := writeSample(t, sampleMeta(t), tensors)
	if err := os.WriteFile(path, data[:len(data)-3], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []LoadMode{LoadRead, LoadMmap} {
		_, err := Open(path, mode)
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(path)) {
			t.Errorf("%v: error %v does not name %s", mode, err, path)
		}
	}
}

func TestWriteErrors(t *testing.T) {
	ok := WriteTensor{Name: "a", DType: tensor.F32, Shape: []int64{2}, Data: make([]byte, 8)}
	tests := []struct {
		name    string
		meta    []KV
		tensors []WriteTensor
	}{
		{"duplicate key", []KV{{"a", Of(uint8(1))}, {"a", Of(uint8(2))}}, nil},
		{"empty key", []KV{{"", Of(uint8(1))}}, nil},
		{"unset value", []KV{{"a", Value{}}}, nil},
		{"alignment not uint32", []KV{{KeyAlignment, Of(uint64(32))}}, nil},
		{"alignment not a power of two", []KV{{KeyAlignment, Uint32(48)}}, nil},
		{"duplicate tensor", nil, []WriteTensor{ok, ok}},
		{"long name", nil, []WriteTensor{{Name: string(make([]byte, 64)), DType: tensor.F32, Shape: []int64{2}, Data: make([]byte, 8)}}},
		{"short data", nil, []WriteTensor{{Name: "a", DType: tensor.F32, Shape: []int64{3}, Data: make([]byte, 8)}}},
		{"partial block row", nil, []WriteTensor{{Name: "a", DType: tensor.Q8_0, Shape: []int64{16, 2}, Data: make([]byte, 34)}}},
		{"no dimensions", nil, []WriteTensor{{Name: "a", DType: tensor.F32, Data: make([]byte, 4)}}},
		{"five dimensions", nil, []WriteTensor{{Name: "a", DType: tensor.F32, Shape: []int64{1, 1, 1, 1, 1}, Data: make([]byte, 4)}}},
		{"no ggml type", nil, []WriteTensor{{Name: "a", DType: tensor.U8, Shape: []int64{1}, Data: make([]byte, 1)}}},
	}
	for _, tc := range tests {
		if err := Write(&bytes.Buffer{}, tc.meta, tc.tensors); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}
