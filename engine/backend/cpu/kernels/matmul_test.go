package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"fusion/engine/tensor"
)

// Tolerances.
//
//   - Kernels at different levels (SIMD vs pure Go) compute the same integer
//     block sums exactly; they only sum floats in another order, so they
//     must agree within tolLevel·Σ_i |x_i|·mag_i, where mag_i is |w_i|, or
//     |s·q_i| + |b| for formats whose kernels split scale and bias terms.
//   - The pure-Go kernels must equal the float64 product with the test's
//     own dequantization within tolRef·Σ|x|·mag (f32 accumulation), plus,
//     for GGUF formats, the activation quantization error, bounded by
//     Σ_blocks (d_x/2)·Σ_{i∈block} |w_i| with d_x = max|x_block|/127.
const (
	tolLevel = 2e-5
	tolRef   = 2e-5
)

// weightCase makes a random matrix of one format.
type weightCase struct {
	name  string
	step  int  // cols must be a multiple of step
	quant bool // activations are quantized (GGUF)
	make  func(r *rand.Rand, rows, cols int) (Weights, *refMatrix, error)
}

func denseCase(dt tensor.DType) weightCase {
	return weightCase{name: dt.String(), step: 1, make: func(r *rand.Rand, rows, cols int) (Weights, *refMatrix, error) {
		data := encodeFloats(randFloats(r, rows*cols), dt)
		w, err := NewDense(dt, rows, cols, data)
		return w, refDense(dt, rows, cols, data), err
	}}
}

// packedCase is an F32 matrix repacked by PackF32.
func packedCase() weightCase {
	return weightCase{name: "PackedF32", step: 1, make: func(r *rand.Rand, rows, cols int) (Weights, *refMatrix, error) {
		data := encodeFloats(randFloats(r, rows*cols), tensor.F32)
		w, err := NewDense(tensor.F32, rows, cols, data)
		if err != nil {
			return nil, nil, err
		}
		return PackF32(w), refDense(tensor.F32, rows, cols, data), nil
	}}
}

func mlxWeightCase(bits, group int, sdt tensor.DType) weightCase {
	return weightCase{
		name: fmt.Sprintf("MLX%d_g%d_%v", bits, group, sdt), step: group,
		make: func(r *rand.Rand, rows, cols int) (Weights, *refMatrix, error) {
			c := randMLX(r, rows, cols, bits, group, sdt)
			w, err := NewMLXAffine(rows, cols, bits, group, c.packed, c.scales, c.biases, sdt)
			return w, c.ref(), err
		},
	}
}

func ggufCase(dt tensor.DType) weightCase {
	return weightCase{name: dt.String(), step: dt.BlockElems(), quant: true,
		make: func(r *rand.Rand, rows, cols int) (Weights, *refMatrix, error) {
			data := randGGUF(r, dt, rows, cols)
			w, err := NewGGUF(dt, rows, cols, data)
			return w, refGGUF(dt, rows, cols, data), err
		}}
}

// ggufExactCase is ggufCase with ExactActivations: no activation
// quantization, so the plain f32 tolerances apply.
func ggufExactCase(dt tensor.DType) weightCase {
	return weightCase{name: dt.String() + "_exact", step: dt.BlockElems(),
		make: func(r *rand.Rand, rows, cols int) (Weights, *refMatrix, error) {
			data := randGGUF(r, dt, rows, cols)
			w, err := NewGGUF(dt, rows, cols, data)
			if w != nil {
				w.ExactActivations = true
			}
			return w, refGGUF(dt, rows, cols, data), err
		}}
}

func allCases() []weightCase {
	cs := []weightCase{denseCase(tensor.F32), denseCase(tensor.BF16), denseCase(tensor.F16), packedCase()}
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, g := range []int{32, 64, 128} {
			cs = append(cs, mlxWeightCase(bits, g, tensor.BF16))
		}
	}
	cs = append(cs, mlxWeightCase(4, 64, tensor.F16), mlxWeightCase(4, 64, tensor.F32),
		mlxWeightCase(8, 32, tensor.F16))
	for _, dt := range []tensor.DType{tensor.Q8_0, tensor.Q4_0, tensor.Q2_K, tensor.Q3_K, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K} {
		cs = append(cs, ggufCase(dt), ggufExactCase(dt))
	}
	return cs
}

// colsFor lists column counts for a case: tails of every vector width
// for dense rows, 1, 2, 3 and 5 groups or blocks otherwise.
func colsFor(c weightCase) []int {
	if c.step == 1 {
		return []int{1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 129, 300, 1031, 4099}
	}
	return []int{c.step, 2 * c.step, 3 * c.step, 5 * c.step}
}

// q8Bound is the activation-quantization error bound for one output.
func q8Bound(x []float32, m *refMatrix, o int) float64 {
	var bound float64
	for b := 0; b < m.cols/32; b++ {
		var amax, wsum float64
		for i := 32 * b; i < 32*b+32; i++ {
			amax = max(amax, math.Abs(float64(x[i])))
			wsum += math.Abs(m.at(o, i))
		}
		bound += amax / 127 / 2 * wsum
	}
	return bound
}

func TestMatMulMatchesReference(t *testing.T) {
	r := newRand(t)
	for _, c := range allCases() {
		var worst float64 // max |y-ref| / (‖x‖·‖w_o‖)
		for n, cols := range colsFor(c) {
			rows, batch := 1+r.IntN(9), 1+n%5
			w, ref, err := c.make(r, rows, cols)
			if err != nil {
				t.Fatal(err)
			}
			x := randFloats(r, batch*cols)
			got := make([]float32, batch*rows)
			genericKernels.MatMul(got, x, batch, w)
			want, mag := refProduct(ref, x, batch)
			for b := 0; b < batch; b++ {
				xb := x[b*cols : (b+1)*cols]
				var xn float64
				for _, v := range xb {
					xn += float64(v) * float64(v)
				}
				for o := 0; o < rows; o++ {
					k := b*rows + o
					tol := tolRef * mag[k]
					if c.quant {
						tol += q8Bound(xb, ref, o)
					}
					diff := math.Abs(float64(got[k]) - want[k])
					if diff > tol {
						t.Fatalf("%s [%d,%d] b=%d o=%d: got %v want %v (diff %g > tol %g)",
							c.name, rows, cols, b, o, got[k], want[k], diff, tol)
					}
					var wn float64
					for i := 0; i < cols; i++ {
						wn += ref.at(o, i) * ref.at(o, i)
					}
					if den := math.Sqrt(xn * wn); den > 0 {
						worst = max(worst, diff/den)
					}
				}
			}
		}
		t.Logf("%-18s max |y-ref|/(‖x‖‖w‖) = %.2g", c.name, worst)
	}
}

func TestMatMulLevelsAgree(t *testing.T) {
	r := newRand(t)
	for _, l := range Levels()[1:] {
		k, err := ForLevel(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range allCases() {
			for n, cols := range colsFor(c) {
				rows, batch := 1+r.IntN(9), 1+(n+len(c.name))%5
				w, ref, err := c.make(r, rows, cols)
				if err != nil {
					t.Fatal(err)
				}
				x := randFloats(r, batch*cols)
				want := make([]float32, batch*rows)
				got := make([]float32, batch*rows)
				genericKernels.MatMul(want, x, batch, w)
				k.MatMul(got, x, batch, w)
				_, mag := refProduct(ref, x, batch)
				for i := range got {
					if diff := math.Abs(float64(got[i] - want[i])); diff > tolLevel*mag[i] {
						t.Fatalf("%v %s [%d,%d] batch %d out %d: got %v, generic %v (diff %g > %g)",
							l, c.name, rows, cols, batch, i, got[i], want[i], diff, tolLevel*mag[i])
					}
				}
			}
		}
	}
}

func TestPoolMatchesSingleThread(t *testing.T) {
	r := newRand(t)
	cases := []weightCase{denseCase(tensor.BF16), mlxWeightCase(4, 64, tensor.BF16), ggufCase(tensor.Q4_K)}
	for _, l := range Levels() {
		k, _ := ForLevel(l)
		p := NewPool(3, k)
		for _, c := range cases {
			rows, cols := 301, 2*256
			w, _, err := c.make(r, rows, cols)
			if err != nil {
				t.Fatal(err)
			}
			// Batches of 6 and more also prepare their activations in parallel.
			for _, batch := range []int{1, 3, 8, 13} {
				x := randFloats(r, batch*cols)
				want := make([]float32, batch*rows)
				got := make([]float32, batch*rows)
				k.MatMul(want, x, batch, w)
				p.MatMul(got, x, batch, w)
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("%v %s batch %d: pool out %d = %v, single thread %v", l, c.name, batch, i, got[i], want[i])
					}
				}
			}
		}
		p.Close()
		p.Close()
	}
}

func TestPoolConcurrentCallers(t *testing.T) {
	r := newRand(t)
	p := NewPool(2, nil)
	defer p.Close()
	c := mlxWeightCase(4, 32, tensor.BF16)
	w, _, err := c.make(r, 200, 128)
	if err != nil {
		t.Fatal(err)
	}
	x := randFloats(r, 128)
	want := make([]float32, 200)
	Default().MatMul(want, x, 1, w)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			got := make([]float32, 200)
			for range 10 {
				p.MatMul(got, x, 1, w)
				for i := range got {
					if got[i] != want[i] {
						errs <- fmt.Errorf("out %d = %v, want %v", i, got[i], want[i])
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestMatMulPanicsOnShortSlices(t *testing.T) {
	w, err := NewF32(2, 3, make([]float32, 6))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []func(){
		func() { MatMul(make([]float32, 2), make([]float32, 2), 1, w) },
		func() { MatMul(make([]float32, 1), make([]float32, 3), 1, w) },
		func() { MatMul(make([]float32, 4), make([]float32, 3), 2, w) },
		func() { MatMul(make([]float32, 2), make([]float32, 3), 0, w) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		}()
	}
}

// Weights straight from a file need not be aligned: every level must give
// the same result on data at an odd address.
func TestUnalignedWeights(t *testing.T) {
	r := newRand(t)
	rows, cols := 5, 256
	x := randFloats(r, 2*cols)
	for _, l := range Levels() {
		k, _ := ForLevel(l)
		for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16, tensor.Q8_0, tensor.Q4_K} {
			var data []byte
			if dt.Quantized() {
				data = randGGUF(r, dt, rows, cols)
			} else {
				data = encodeFloats(randFloats(r, rows*cols), dt)
			}
			odd := make([]byte, len(data)+1)[1:]
			copy(odd, data)
			mk := func(b []byte) Weights {
				var w Weights
				var err error
				if dt.Quantized() {
					w, err = NewGGUF(dt, rows, cols, b)
				} else {
					w, err = NewDense(dt, rows, cols, b)
				}
				if err != nil {
					t.Fatal(err)
				}
				return w
			}
			want, got := make([]float32, 2*rows), make([]float32, 2*rows)
			k.MatMul(want, x, 2, mk(data))
			k.MatMul(got, x, 2, mk(odd))
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%v %v: unaligned out %d = %v, aligned %v", l, dt, i, got[i], want[i])
				}
			}
		}
	}
}

// A batched product gives every row bit-identical to a batch-1 product of
// that row (the model's batching tests rely on it), at every level and
// through the tiled kernels.
func TestBatchRowsBitIdentical(t *testing.T) {
	r := newRand(t)
	for _, l := range Levels() {
		k, _ := ForLevel(l)
		for _, c := range allCases() {
			for i, cols := range colsFor(c) {
				// Batches around the 4-row tiles: full tiles, tails of
				// 1 to 3, and more than two tiles.
				batch := []int{2, 5, 8, 9, 11, 16, 17}[i%7]
				rows := 1 + r.IntN(9)
				w, _, err := c.make(r, rows, cols)
				if err != nil {
					t.Fatal(err)
				}
				x := randFloats(r, batch*cols)
				got := make([]float32, batch*rows)
				k.MatMul(got, x, batch, w)
				one := make([]float32, rows)
				for b := 0; b < batch; b++ {
					k.MatMul(one, x[b*cols:(b+1)*cols], 1, w)
					for o, v := range one {
						if got[b*rows+o] != v {
							t.Fatalf("%v %s [%d,%d] batch %d row %d out %d: batched %v, alone %v", l, c.name, rows, cols, batch, b, o, got[b*rows+o], v)
						}
					}
				}
			}
		}
	}
}

// Run calls fn once per index, from goroutines numbered below Threads,
// whether the workers spin or park between jobs, and also for jobs
// published before the worker goroutines first ran.
func TestPoolRun(t *testing.T) {
	for _, tc := range []struct {
		threads int
		spin    time.Duration
	}{{1, DefaultSpin}, {2, DefaultSpin}, {3, 0}, {4, 50 * time.Microsecond}} {
		for round := range 20 {
			p := newPoolSpin(tc.threads, nil, tc.spin)
			for _, n := range []int{1, 2, 7, 100, 1000} {
				counts := make([]atomic.Int32, n)
				var badWorker atomic.Int32
				p.Run(n, func(worker, i int) {
					if worker < 0 || worker >= tc.threads {
						badWorker.Store(int32(worker) + 1)
					}
					counts[i].Add(1)
				})
				for i := range counts {
					if c := counts[i].Load(); c != 1 {
						t.Fatalf("threads %d spin %v round %d n %d: index %d ran %d times", tc.threads, tc.spin, round, n, i, c)
					}
				}
				if w := badWorker.Load(); w != 0 {
					t.Fatalf("threads %d: worker index %d", tc.threads, w-1)
				}
			}
			if round%2 == 1 {
				time.Sleep(2 * tc.spin) // let the workers park before Close
			}
			p.Close()
		}
	}
}

// A panic in the caller's share of a job leaves the pool usable: the
// workers finish the job before the next one reuses it.
func TestPoolRunPanicLeavesPoolUsable(t *testing.T) {
	p := NewPool(2, nil)
	defer p.Close()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		p.Run(64, func(worker, i int) {
			if worker == 0 {
				panic("boom")
			}
			time.Sleep(time.Millisecond)
		})
	}()
	var sum atomic.Int64
	p.Run(100, func(_, i int) { sum.Add(int64(i)) })
	if got := sum.Load(); got != 4950 {
		t.Fatalf("sum after the panic = %d, want 4950", got)
	}
}

// Run returns only after every call has returned, also when the caller
// parks at once (no spinning) and jobs follow each other closely: a
// worker still signalling the end of one job must not end the next.
func TestPoolRunWaitsForAllCalls(t *testing.T) {
	for _, threads := range []int{2, 3} {
		p := newPoolSpin(threads, nil, 0)
		for iter := range 3000 {
			var finished atomic.Int32
			p.Run(threads+1, func(_, i int) {
				if (iter+i)%3 == 0 {
					runtime.Gosched()
				}
				finished.Add(1)
			})
			if got := finished.Load(); got != int32(threads+1) {
				t.Fatalf("threads %d iteration %d: Run returned with %d of %d calls finished", threads, iter, got, threads+1)
			}
		}
		p.Close()
	}
}
