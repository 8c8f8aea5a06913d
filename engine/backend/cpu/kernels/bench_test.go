package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"fusion/engine/tensor"
)

// BenchmarkMatVec reports, per format, shape, level and thread count,
// the weight bytes streamed (MB/s, from SetBytes) and GFLOP/s (2·rows·cols
// per product) of a single-row product. Run with, e.g.,
//
//	go test -run '^$' -bench MatVec -benchtime 300ms ./engine/backend/cpu/kernels/
func BenchmarkMatVec(b *testing.B) {
	shapes := []struct{ rows, cols int }{{3072, 1024}, {1024, 3072}, {151936, 1024}}
	formats := []struct {
		name string
		make func(r *rand.Rand, rows, cols int) Weights
	}{
		{"F32", benchDense(tensor.F32)},
		{"BF16", benchDense(tensor.BF16)},
		{"F16", benchDense(tensor.F16)},
		{"MLX4g64", benchMLX(4, 64)},
		{"MLX8g64", benchMLX(8, 64)},
		{"Q8_0", benchGGUF(tensor.Q8_0)},
		{"Q4_0", benchGGUF(tensor.Q4_0)},
		{"Q4_K", benchGGUF(tensor.Q4_K)},
		{"Q6_K", benchGGUF(tensor.Q6_K)},
		{"Q2_K", benchGGUF(tensor.Q2_K)},
		{"Q3_K", benchGGUF(tensor.Q3_K)},
		{"Q5_K", benchGGUF(tensor.Q5_K)},
	}
	for _, f := range formats {
		for _, s := range shapes {
			var w Weights // built on first use, shared by the sub-benchmarks
			var x []float32
			for _, l := range Levels() {
				k, _ := ForLevel(l)
				for _, threads := range []int{1, 2} {
					name := fmt.Sprintf("%s/%dx%d/%v/t%d", f.name, s.rows, s.cols, l, threads)
					b.Run(name, func(b *testing.B) {
						if w == nil {
							r := rand.New(rand.NewPCG(1, 2))
							w = f.make(r, s.rows, s.cols)
							x = randFloats(r, s.cols)
						}
						p := NewPool(threads, k)
						defer p.Close()
						y := make([]float32, s.rows)
						b.SetBytes(int64(w.Bytes()))
						b.ResetTimer()
						for b.Loop() {
							p.MatMul(y, x, 1, w)
						}
						b.ReportMetric(2*float64(s.rows)*float64(s.cols)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					})
				}
			}
		}
	}
}

// BenchmarkMatMulBatch reports GFLOP/s of a 64-row (prefill-like)
// product at the widest level on 2 threads.
//
//	go test -run '^$' -bench MatMulBatch ./engine/backend/cpu/kernels/
func BenchmarkMatMulBatch(b *testing.B) {
	const batch = 64
	formats := []struct {
		name string
		make func(r *rand.Rand, rows, cols int) Weights
	}{
		{"F32", benchDense(tensor.F32)},
		{"BF16", benchDense(tensor.BF16)},
		{"F16", benchDense(tensor.F16)},
		{"MLX4g64", benchMLX(4, 64)},
		{"MLX8g64", benchMLX(8, 64)},
		{"Q8_0", benchGGUF(tensor.Q8_0)},
		{"Q4_K", benchGGUF(tensor.Q4_K)},
		{"Q6_K", benchGGUF(tensor.Q6_K)},
	}
	for _, f := range formats {
		for _, s := range []struct{ rows, cols int }{{3072, 1024}, {1024, 3072}} {
			b.Run(fmt.Sprintf("%s/%dx%d", f.name, s.rows, s.cols), func(b *testing.B) {
				r := rand.New(rand.NewPCG(1, 2))
				w := f.make(r, s.rows, s.cols)
				x := randFloats(r, batch*s.cols)
				p := NewPool(2, nil)
				defer p.Close()
				y := make([]float32, batch*s.rows)
				for b.Loop() {
					p.MatMul(y, x, batch, w)
				}
				b.ReportMetric(2*batch*float64(s.rows)*float64(s.cols)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// fillRandom fills b quickly with pseudo-random bytes.
func fillRandom(r *rand.Rand, b []byte) {
	c := rand.NewChaCha8([32]byte{byte(r.Uint32())})
	_, _ = c.Read(b)
}

// tile repeats a block of valid encoded values over n bytes.
func tile(block []byte, n int) []byte {
	out := make([]byte, n)
	for i := 0; i < n; i += copy(out[i:], block) {
	}
	return out
}

func benchDense(dt tensor.DType) func(r *rand.Rand, rows, cols int) Weights {
	return func(r *rand.Rand, rows, cols int) Weights {
		es := 2
		if dt == tensor.F32 {
			es = 4
		}
		data := tile(encodeFloats(randFloats(r, 1<<16+7), dt), rows*cols*es)
		w, err := NewDense(dt, rows, cols, data)
		if err != nil {
			panic(err)
		}
		return w
	}
}

func benchMLX(bits, group int) func(r *rand.Rand, rows, cols int) Weights {
	return func(r *rand.Rand, rows, cols int) Weights {
		packed := make([]byte, rows*cols*bits/8)
		fillRandom(r, packed)
		ng := rows * cols / group
		s := tile(encodeFloats(randFloats(r, 4099), tensor.BF16), 2*ng)
		bs := tile(encodeFloats(randFloats(r, 4093), tensor.BF16), 2*ng)
		w, err := NewMLXAffine(rows, cols, bits, group, packed, s, bs, tensor.BF16)
		if err != nil {
			panic(err)
		}
		return w
	}
}

func benchGGUF(dt tensor.DType) func(r *rand.Rand, rows, cols int) Weights {
	return func(r *rand.Rand, rows, cols int) Weights {
		n := rows * cols / dt.BlockElems() * dt.BlockBytes()
		block := randGGUF(r, dt, 1, 4096) // 4096 is a whole number of blocks of every type
		w, err := NewGGUF(dt, rows, cols, tile(block, n))
		if err != nil {
			panic(err)
		}
		return w
	}
}

// BenchmarkVector times the vector ops at the widest level (MB/s counts
// the bytes of the inputs read).
func BenchmarkVector(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{4096, 151936} {
		x, y, z := randFloats(r, n), randFloats(r, n), make([]float32, n)
		for _, l := range Levels() {
			k, _ := ForLevel(l)
			ops := []struct {
				name string
				in   int
				f    func()
			}{
				{"Dot", 2, func() { k.Dot(x, y) }},
				{"Axpy", 2, func() { k.Axpy(0.5, x, z) }},
				{"RMSNorm", 2, func() { k.RMSNorm(z, x, y, 1e-6) }},
				{"Softmax", 1, func() { copy(z, x); k.Softmax(z) }},
				{"SwiGLU", 2, func() { k.SwiGLU(z, x, y) }},
			}
			for _, op := range ops {
				b.Run(fmt.Sprintf("%s/%d/%v", op.name, n, l), func(b *testing.B) {
					b.SetBytes(int64(4 * n * op.in))
					for b.Loop() {
						op.f()
					}
				})
			}
		}
	}
}

// BenchmarkMatMulRows reports ns/op and GFLOP/s of decode-sized batches
// (1, 4, 8, 16 activation rows, as a continuous batch of streams gives)
// at the widest level on 2 threads; ns/op at 8 rows against 1 row is the
// cost of batching 8 streams.
//
//	go test -run '^$' -bench MatMulRows ./engine/backend/cpu/kernels/
func BenchmarkMatMulRows(b *testing.B) {
	formats := []struct {
		name string
		make func(r *rand.Rand, rows, cols int) Weights
	}{
		{"BF16", benchDense(tensor.BF16)},
		{"MLX4g64", benchMLX(4, 64)},
		{"Q8_0", benchGGUF(tensor.Q8_0)},
		{"Q4_K", benchGGUF(tensor.Q4_K)},
	}
	for _, f := range formats {
		for _, s := range []struct{ rows, cols int }{{3072, 1024}, {1024, 3072}} {
			r := rand.New(rand.NewPCG(1, 2))
			w := f.make(r, s.rows, s.cols)
			for _, batch := range []int{1, 4, 8, 16} {
				b.Run(fmt.Sprintf("%s/%dx%d/rows%d", f.name, s.rows, s.cols, batch), func(b *testing.B) {
					x := randFloats(r, batch*s.cols)
					p := NewPool(2, nil)
					defer p.Close()
					y := make([]float32, batch*s.rows)
					for b.Loop() {
						p.MatMul(y, x, batch, w)
					}
					b.ReportMetric(2*float64(batch)*float64(s.rows)*float64(s.cols)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// BenchmarkEncoderMatMul reports GFLOP/s of the f32 products of a small
// BERT encoder (all-MiniLM-L6-v2's 384→384, 384→1536 and 1536→384) at
// 1, 16 and 128 activation rows on 2 threads, row-major (Dense) against
// packed (Packed), and of a single-row F32 product (decode) both ways.
//
//	go test -run '^$' -bench EncoderMatMul ./engine/backend/cpu/kernels/
func BenchmarkEncoderMatMul(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range []struct{ rows, cols int }{{384, 384}, {1536, 384}, {384, 1536}, {3072, 1024}} {
		d := benchDense(tensor.F32)(r, s.rows, s.cols)
		pk := PackF32(d)
		for _, batch := range []int{1, 16, 128} {
			for _, w := range []Weights{d, pk} {
				b.Run(fmt.Sprintf("%dx%d/rows%d/%T", s.rows, s.cols, batch, w), func(b *testing.B) {
					x := randFloats(r, batch*s.cols)
					p := NewPool(2, nil)
					defer p.Close()
					y := make([]float32, batch*s.rows)
					for b.Loop() {
						p.MatMul(y, x, batch, w)
					}
					b.ReportMetric(2*float64(batch)*float64(s.rows)*float64(s.cols)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}
