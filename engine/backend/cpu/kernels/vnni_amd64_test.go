//go:build amd64 && !purego

package kernels

import (
	"math"
	"testing"

	"fusion/engine/tensor"
)

// The VNNI variants of the AVX-512 Q4_K kernels (one row, 4 rows) give
// the same bits as the plain ones, which run on AVX-512 CPUs without
// VNNI.
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
		g.prepare(nil, randFloats(r, 4*cols), 4, &a)
		g.prepareRows(&Default().impl, &a, 0, 4)
		x := a.q8Row(0)
		x4 := q8Row{q: a.q8.q, d: a.q8.d, s: a.q8.s}
		if x.d[0] == 0 {
			t.Fatal("the activations were not quantized")
		}
		for o := range rows {
			row := g.data[o*g.rowBytes : (o+1)*g.rowBytes]
			got, want := q4KSIMD512VNNI(x, row), q4KSIMD512(x, row)
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("cols %d row %d: VNNI %v, AVX-512 %v", cols, o, got, want)
			}
			var got4, want4 [4]float32
			q4Kx4SIMD512VNNI(x4, cols, row, &got4)
			q4Kx4SIMD512(x4, cols, row, &want4)
			for i := range got4 {
				if math.Float32bits(got4[i]) != math.Float32bits(want4[i]) {
					t.Fatalf("cols %d row %d, 4 rows: activation row %d: VNNI %v, AVX-512 %v", cols, o, i, got4[i], want4[i])
				}
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
	g.prepareRows(&Default().impl, &a, 0, 1)
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

// The multi-row GGUF kernels give each row the bits of the one-row
// kernel on that row alone, and write exactly len(dst) results.
func TestGGUFRowsMatchOneRow(t *testing.T) {
	r := newRand(t)
	cases := []struct {
		dt   tensor.DType
		rows func(q8Row, []byte, []float32)
		one  func(q8Row, []byte) float32
		need bool
	}{
		{tensor.Q6_K, q6KRowsSIMD2, q6KSIMD2, features.avx2},
		{tensor.Q4_K, q4KRowsSIMD512VNNI, q4KSIMD512, features.avx512 && features.vnni},
	}
	for _, c := range cases {
		if !c.need {
			t.Logf("%v: this CPU lacks the kernel's instructions", c.dt)
			continue
		}
		for _, cols := range []int{256, 1024, 3072} {
			const rows = 37
			w, _, err := ggufCase(c.dt).make(r, rows, cols)
			if err != nil {
				t.Fatal(err)
			}
			g := w.(*GGUF)
			var a actBuf
			g.prepare(nil, randFloats(r, cols), 1, &a)
			g.prepareRows(&Default().impl, &a, 0, 1)
			x := a.q8Row(0)
			got := make([]float32, rows+1)
			got[rows] = 42
			c.rows(x, g.data, got[:rows])
			if got[rows] != 42 {
				t.Fatalf("%v cols %d: wrote past dst", c.dt, cols)
			}
			for o := range rows {
				want := c.one(x, g.data[o*g.rowBytes:(o+1)*g.rowBytes])
				if math.Float32bits(got[o]) != math.Float32bits(want) {
					t.Fatalf("%v cols %d row %d: rows kernel %v, one row %v", c.dt, cols, o, got[o], want)
				}
			}
		}
	}
}
