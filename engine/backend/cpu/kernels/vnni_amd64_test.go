//go:build amd64 && !purego

package kernels

import (
	"math"
	"testing"

	"fusion/engine/tensor"
)

// The VNNI variant of the AVX-512 Q4_K kernel gives the same bits as the
// plain one, which is what runs on AVX-512 CPUs without VNNI.
func TestQ4KVNNIMatchesAVX512(t *testing.T) {
	if !features.avx512 || !features.vnni {
		t.Skip("this CPU lacks AVX-512 VNNI")
	}
	r := newRand(t)
	for _, cols := range []int{256, 1024, 3072} {
		rows := 64
		w, _, err := ggufCase(tensor.Q4_K).make(r, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		g := w.(*GGUF)
		var a actBuf
		g.prepare(nil, randFloats(r, cols), 1, &a)
		x := a.q8Row(0)
		for o := range rows {
			row := g.data[o*g.rowBytes : (o+1)*g.rowBytes]
			got, want := q4KSIMD512VNNI(x, row), q4KSIMD512(x, row)
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("cols %d row %d: VNNI %v, AVX-512 %v", cols, o, got, want)
			}
		}
	}
}

// BenchmarkQ4KRow compares the AVX-512 Q4_K row kernels on weights that
// stay in cache (instruction throughput, not memory).
func BenchmarkQ4KRow(b *testing.B) {
	if !features.avx512 || !features.vnni {
		b.Skip("this CPU lacks AVX-512 VNNI")
	}
	r := newRand(b)
	const rows, cols = 64, 3072
	w, _, err := ggufCase(tensor.Q4_K).make(r, rows, cols)
	if err != nil {
		b.Fatal(err)
	}
	g := w.(*GGUF)
	var a actBuf
	g.prepare(nil, randFloats(r, cols), 1, &a)
	x := a.q8Row(0)
	for _, k := range []struct {
		name string
		f    func(q8Row, []byte) float32
	}{{"avx512", q4KSIMD512}, {"vnni", q4KSIMD512VNNI}, {"avx512", q4KSIMD512}, {"vnni", q4KSIMD512VNNI}} {
		b.Run(k.name, func(b *testing.B) {
			b.SetBytes(int64(len(g.data)))
			for b.Loop() {
				for o := range rows {
					k.f(x, g.data[o*g.rowBytes:(o+1)*g.rowBytes])
				}
			}
		})
	}
}
