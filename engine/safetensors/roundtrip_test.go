package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"fusion/engine/tensor"
)

func sampleTensors() []tensor.Tensor {
	mk := func(name string, dt tensor.DType, shape ...int64) tensor.Tensor {
		n, _ := tensor.NumElements(shape)
		size, _ := dt.ByteSize(n)
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(len(name)*31 + i*7)
		}
		return tensor.Tensor{Name: name, DType: dt, Shape: shape, Data: data}
	}
	return []tensor.Tensor{
		mk("model.embed_tokens.weight", tensor.BF16, 5, 3),
		mk("z.scalar", tensor.F32),
		mk("a.packed", tensor.U32, 2, 2),
		mk("empty", tensor.F16, 0, 4),
		mk("odd \"name\"\n<é>", tensor.U8, 3),
		mk("f64", tensor.F64, 1, 1, 2),
		mk("flags", tensor.Bool, 3),
		mk("i64", tensor.I64, 2),
	}
}

func TestRoundTrip(t *testing.T) {
	in := sampleTensors()
	md := map[string]string{"format": "mlx", "b": "2"}
	var buf bytes.Buffer
	if err := Write(&buf, in, md); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	n := binary.LittleEndian.Uint64(raw)
	if n%8 != 0 {
		t.Fatalf("header length %d is not a multiple of 8", n)
	}
	if want := `{"__metadata__":{"b":"2","format":"mlx"},"model.embed_tokens.weight":{"dtype":"BF16","shape":[5,3],"data_offsets":[0,30]}`; !bytes.HasPrefix(raw[8:], []byte(want)) {
		t.Fatalf("header starts %q, want %q", raw[8:8+len(want)], want)
	}
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []LoadMode{LoadRead, LoadMmap, LoadDefault} {
		t.Run(mode.String(), func(t *testing.T) {
			f, err := Open(path, mode)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Mode() != mode.Resolve() {
				t.Errorf("mode = %v, want %v", f.Mode(), mode.Resolve())
			}
			checkTensors(t, f, in)
			if got := f.Metadata(); len(got) != 2 || got["format"] != "mlx" || got["b"] != "2" {
				t.Errorf("metadata = %v", got)
			}
			if f.Size() != int64(len(raw)) {
				t.Errorf("size = %d, want %d", f.Size(), len(raw))
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if _, ok := f.Tensor(in[0].Name); ok {
				t.Error("tensor still reachable after Close")
			}
		})
	}
}

func checkTensors(t *testing.T, f *File, want []tensor.Tensor) {
	t.Helper()
	var total int64
	got := f.Tensors()
	if len(got) != len(want) {
		t.Fatalf("%d tensors, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].Name != w.Name {
			t.Errorf("tensor %d is %q, want %q (header order)", i, got[i].Name, w.Name)
		}
		g, ok := f.Tensor(w.Name)
		if !ok {
			t.Fatalf("tensor %q missing", w.Name)
		}
		if g.DType != w.DType || !slices.Equal(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data) {
			t.Errorf("tensor %q = %v %v %x, want %v %v %x", w.Name, g.DType, g.Shape, g.Data, w.DType, w.Shape, w.Data)
		}
		if cap(g.Data) != len(g.Data) {
			t.Errorf("tensor %q: cap %d exceeds len %d; appends would clobber the next tensor", w.Name, cap(g.Data), len(g.Data))
		}
		total += int64(len(w.Data))
	}
	if f.DataBytes() != total {
		t.Errorf("DataBytes = %d, want %d", f.DataBytes(), total)
	}
}

func TestWriteNilMetadataAndFile(t *testing.T) {
	in := sampleTensors()[:2]
	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := WriteFile(path, in, nil); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(raw)
	want := `{"model.embed_tokens.weight":{"dtype":"BF16","shape":[5,3],"data_offsets":[0,30]},"z.scalar":{"dtype":"F32","shape":[],"data_offsets":[30,34]}}`
	pad := (8 - len(want)%8) % 8
	if got := string(raw[8 : 8+n]); got != want+string(bytes.Repeat([]byte(" "), pad)) {
		t.Fatalf("header = %q", got)
	}
	f, err := FromBytes(path, raw)
	if err != nil {
		t.Fatal(err)
	}
	if f.Metadata() != nil {
		t.Errorf("metadata = %v, want nil", f.Metadata())
	}
	checkTensors(t, f, in)
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("WriteFile left %d files behind", len(entries))
	}
}

func TestWriteRejects(t *testing.T) {
	good := tensor.Tensor{Name: "a", DType: tensor.F32, Shape: []int64{2}, Data: make([]byte, 8)}
	tests := []struct {
		name string
		in   []tensor.Tensor
		want error
	}{
		{"duplicate", []tensor.Tensor{good, good}, ErrDuplicate},
		{"short data", []tensor.Tensor{{Name: "a", DType: tensor.F32, Shape: []int64{3}, Data: make([]byte, 8)}}, ErrSizeMismatch},
		{"gguf dtype", []tensor.Tensor{{Name: "a", DType: tensor.Q4_0, Shape: []int64{32}, Data: make([]byte, 18)}}, ErrBadDType},
		{"empty name", []tensor.Tensor{{DType: tensor.F32, Shape: []int64{2}, Data: make([]byte, 8)}}, nil},
		{"reserved name", []tensor.Tensor{{Name: metadataKey, DType: tensor.F32, Shape: []int64{2}, Data: make([]byte, 8)}}, nil},
		{"negative dim", []tensor.Tensor{{Name: "a", DType: tensor.F32, Shape: []int64{-2}}}, nil},
	}
	for _, tc := range tests {
		err := Write(&bytes.Buffer{}, tc.in, nil)
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: error = %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestParseLoadMode(t *testing.T) {
	for s, want := range map[string]LoadMode{"": LoadDefault, "default": LoadDefault, "read": LoadRead, "mmap": LoadMmap} {
		got, err := ParseLoadMode(s)
		if err != nil || got != want {
			t.Errorf("ParseLoadMode(%q) = %v, %v", s, got, err)
		}
		if s != "" && got.String() != s {
			t.Errorf("%v.String() = %q", got, got.String())
		}
	}
	if _, err := ParseLoadMode("mapped"); err == nil {
		t.Error("ParseLoadMode accepted a bad name")
	}
}
