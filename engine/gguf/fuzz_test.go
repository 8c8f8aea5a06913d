package gguf

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"fusion/engine/tensor"
)

// FuzzGGUFHeader feeds arbitrary bytes to the parser: it must return an
// error wrapping ErrInvalid or ErrUnsupported, or a File whose tensors lie
// inside the input with the size their type and shape imply; a parsed file
// written back out must re-parse and re-encode to the same bytes.
//
//	go test -run '^$' -fuzz '^FuzzGGUFHeader$' -fuzztime 60s ./engine/gguf/
func FuzzGGUFHeader(f *testing.F) {
	r := rand.New(rand.NewPCG(13, 14))
	small := []WriteTensor{
		{Name: "a", DType: tensor.F32, Shape: []int64{2, 2}, Data: make([]byte, 16)},
		{Name: "b", DType: tensor.Q4_0, Shape: []int64{32}, Data: make([]byte, 18)},
	}
	f.Add(writeSample(f, sampleMeta(f), small))
	f.Add(writeSample(f, []KV{{KeyArchitecture, String("qwen3")}}, sampleTensors(r)[:3]))
	f.Add(writeSample(f, []KV{{KeyAlignment, Uint32(8)}}, small))
	f.Add(writeSample(f, nil, nil))
	f.Add(head(2, 0).ti("a", 0, 0, 16).ti("b", 0, 32, 16).data(128))
	f.Add(nestedArrays(3))
	f.Add([]byte("GGUF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz", data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error %v wraps neither ErrInvalid nor ErrUnsupported", err)
			}
			return
		}
		var wts []WriteTensor
		for _, tt := range file.Tensors {
			n, err := tensor.NumElements(tt.Shape)
			if err != nil {
				t.Fatalf("%q: %v", tt.Name, err)
			}
			size, err := tt.DType.ByteSize(n)
			if err != nil || int64(len(tt.Data)) != size {
				t.Fatalf("%q: %d bytes for %d %v elements (%v)", tt.Name, len(tt.Data), n, tt.DType, err)
			}
			if n <= 1<<16 {
				if _, err := RowDequantizer(tt.DType); err == nil {
					if _, err := ToFloat32(tt); err != nil {
						t.Fatalf("%q: %v", tt.Name, err)
					}
				}
			}
			wts = append(wts, WriteTensor{Name: tt.Name, DType: tt.DType, Shape: tt.Shape, Data: tt.Data})
		}
		var w1 bytes.Buffer
		if err := Write(&w1, file.KV, wts); err != nil {
			return // e.g. names or shapes our writer refuses to produce
		}
		again, err := Parse("rewritten", w1.Bytes())
		if err != nil {
			t.Fatalf("re-parsing our own output: %v", err)
		}
		var wts2 []WriteTensor
		for _, tt := range again.Tensors {
			wts2 = append(wts2, WriteTensor{Name: tt.Name, DType: tt.DType, Shape: tt.Shape, Data: tt.Data})
		}
		var w2 bytes.Buffer
		if err := Write(&w2, again.KV, wts2); err != nil {
			t.Fatalf("re-writing: %v", err)
		}
		if !bytes.Equal(w1.Bytes(), w2.Bytes()) {
			t.Fatal("write(parse(write(x))) differs from write(x)")
		}
	})
}
