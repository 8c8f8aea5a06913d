package kernels

import "fmt"

// impl is the function table of one level. The matrix kernels compute one
// weight row against one activation row; their callers have checked every
// length, so implementations may rely on them.
type impl struct {
	level Level

	// Dense rows: len(w) == 2*len(x) for BF16 and F16, 4*len(x) for F32.
	dotF32  func(a, b []float32) float32
	dotF32B func(x []float32, w []byte) float32
	dotBF16 func(x []float32, w []byte) float32
	dotF16  func(x []float32, w []byte) float32
	// Four activation rows (x holds 4 rows of cols) against one weight
	// row, each result bit-identical to the one-row function above; nil
	// when the level has none.
	dotF32B4, dotBF164, dotF164 func(x []float32, cols int, w []byte, out *[4]float32)
	// bf16Tile, when set, replaces dotBF16 and dotBF164 for BF16
	// weights: out[4·j+i] = Σ x[j]·w[i] for the nx activation rows x[j]
	// (nx is 1 to 4, all of one length) and the 4 weight rows w[i]. Each
	// result is bit-identical whatever nx and whichever rows share the
	// tile, so BF16 products stay row-independent at any batch size.
	// pf, when not 0, is the byte offset from w[0] of the next tile's
	// rows, which the kernel may prefetch while it computes this one.
	bf16Tile func(x *[4][]float32, nx int, w *[4][]byte, out *[16]float32, pf int)
	// f32Tile is bf16Tile for f32 weight rows. mlx4Dequant sets dst to
	// s[g]·q[i]+b[g] (g = i/group) for the 4-bit codes q of a row of
	// len(dst) values, laid out as mlxPermute lays out activations (full
	// chunks permuted, the rest in order); s and b have 3 readable floats
	// past their end. When both are set, MLX 4-bit products dequantize 4
	// weight rows at a time into scratch and run f32Tile over them and
	// the permuted activations, instead of mlx4.
	f32Tile     func(x *[4][]float32, nx int, w *[4][]float32, out *[16]float32)
	mlx4Dequant func(dst []float32, w []byte, s, b []float32, group int)
	// mlx4Fused, when set, is mlx4Dequant then f32Tile for one activation
	// row and 4 weight rows (see mlx4Fused1x4SIMD512) when cols is a
	// multiple of 128, without the scratch; it serves batches under 4.
	mlx4Fused func(xp []float32, w []byte, rowBytes int, s, b []float32, ng, group int, out *[4]float32)

	// gemm computes outputs [r0, r1) (r0 a multiple of PanelRows) of m
	// activation rows against a packed matrix (see Packed and MulPacked);
	// every output is summed in column order from 0 with one rounding per
	// step, so each is the same whatever m and the tile it lands in.
	gemm func(dst []float32, ldd int, x []float32, ldx, m int, p []float32, cols, r0, r1 int)

	// widen converts len(dst) BF16 (bf16 set) or F16 values to f32.
	widen func(dst []float32, src []byte, bf16 bool)

	// MLX affine rows, 4 and 8 bits: Σ_g (s[g]·Σ_{i∈g} x[i]·q[i] +
	// b[g]·xsum[g]), xsum[g] being Σ_{i∈g} x[i]. xp is x laid out as
	// mlxPermute describes when mlx4Perm is set, else nil. s has 3 readable
	// floats past its end.
	mlx4 func(x, xp []float32, w []byte, s, b, xsum []float32, group int) float32
	mlx8 func(x []float32, w []byte, s, b, xsum []float32, group int) float32
	// mlx8x4 is mlx8 for 4 activation rows (x: 4 rows of cols; xsum: 4
	// rows of cols/group), bit-identical to it row by row; nil when the
	// level has none.
	mlx8x4 func(x []float32, cols int, w []byte, s, b, xsum []float32, group int, out *[4]float32)
	// mlx4Perm: the level's MLX 4-bit products read the activations laid
	// out by mlxPermute (the AVX-512 dequantized tiles do).
	mlx4Perm bool

	// quantizeQ8 quantizes an activation row for the GGUF rows, with
	// quantizeQ8Generic's exact results.
	quantizeQ8 func(dst q8Row, x []float32)
	// GGUF rows against an activation row quantized to 8 bits per 32.
	q8_0 func(a q8Row, w []byte) float32
	q4_0 func(a q8Row, w []byte) float32
	q4K  func(a q8Row, w []byte) float32
	q6K  func(a q8Row, w []byte) float32
	// Q2_K, Q3_K and Q5_K rows (one row at a time at every level).
	q2K, q3K, q5K func(a q8Row, w []byte) float32
	// Four consecutive activation rows of cols (a holds them) against one
	// weight row, bit-identical to the one-row function row by row; nil
	// when the level has none.
	q4K4, q6K4, q8_04 func(a q8Row, cols int, w []byte, out *[4]float32)
	// The one-row function over the len(dst) consecutive weight rows in
	// w, dst[i] for row i, bit-identical to it, in one call (a call per
	// row cost a tenth of a decode step); nil when the level has none.
	q4KRows, q6KRows func(a q8Row, w []byte, dst []float32)
	// q4K4Rows and q6K4Rows are q4K4 and q6K4 over the whole weight rows
	// in w, in one call: dst[j·stride+i] for activation row j and weight
	// row i (a prompt's product made a call per weight row and group of 4
	// activation rows); nil when the level has none.
	q4K4Rows, q6K4Rows func(a q8Row, cols int, w []byte, dst []float32, stride int)

	// Vector ops; lengths already checked equal.
	axpy  func(alpha float32, x, y []float32)
	add   func(dst, a, b []float32)
	mul   func(dst, a, b []float32)
	scale func(dst, x []float32, s float32)
	// maxf returns the largest element of a non-empty x (NaNs may be
	// skipped); expSubSum sets x[i] = e^(x[i]-m) and returns the sum;
	// swiglu computes dst = g·u/(1+e^(-g)).
	maxf      func(x []float32) float32
	expSubSum func(x []float32, m float32) float32
	swiglu    func(dst, g, u []float32)
	// gelu computes dst = x·Φ(x) (see Kernels.GELU).
	gelu func(dst, x []float32)
}

var genericImpl = impl{
	level:      LevelGeneric,
	dotF32:     dotF32Generic,
	dotF32B:    dotF32BGeneric,
	dotBF16:    dotBF16Generic,
	dotF16:     dotF16Generic,
	widen:      widenGeneric,
	gemm:       gemmGeneric,
	mlx4:       mlx4Generic,
	mlx8:       mlx8Generic,
	quantizeQ8: quantizeQ8Generic,
	q8_0:       q8_0Generic,
	q4_0:       q4_0Generic,
	q4K:        q4KGeneric,
	q6K:        q6KGeneric,
	q2K:        q2KGeneric,
	q3K:        q3KGeneric,
	q5K:        q5KGeneric,
	axpy:       axpyGeneric,
	add:        addGeneric,
	mul:        mulGeneric,
	scale:      scaleGeneric,

	maxf:      maxGeneric,
	expSubSum: expSubSumGeneric,
	swiglu:    swigluGeneric,
	gelu:      geluGeneric,
}

// Kernels is the set of kernels of one Level. It is immutable and safe for
// concurrent use.
type Kernels struct {
	impl impl
}

var (
	genericKernels = &Kernels{impl: genericImpl}
	bestKernels    = mustForLevel(Detect())
)

func mustForLevel(l Level) *Kernels {
	k, err := ForLevel(l)
	if err != nil {
		panic(err)
	}
	return k
}

// ForLevel returns the kernels of level l, or an error if this CPU or build
// cannot run them.
func ForLevel(l Level) (*Kernels, error) {
	if !l.Supported() {
		return nil, fmt.Errorf("kernels: level %v is not supported on this CPU", l)
	}
	if l == LevelGeneric {
		return genericKernels, nil
	}
	return &Kernels{impl: simdImpl(l)}, nil
}

// Default returns the kernels of the widest level this CPU supports.
func Default() *Kernels { return bestKernels }

// Level reports the instruction-set level of k.
func (k *Kernels) Level() Level { return k.impl.level }
