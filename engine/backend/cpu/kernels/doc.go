// Package kernels holds the hot compute kernels of the pure-Go CPU
// backend: matrix-vector and small-batch matrix-matrix products
// y[b][o] = Σ_i x[b][i]·W[o][i] over weights stored as in model files
// (F32, BF16, F16, MLX affine-quantized, GGUF Q8_0/Q4_0 and the K-quants
// Q2_K/Q3_K/Q4_K/Q5_K/Q6_K), and
// the small vector operations a transformer needs (dot, axpy, add, mul,
// scale, RMSNorm, softmax, SwiGLU).
//
// # Levels
//
// Every kernel has a pure-Go implementation. On amd64 the hot loops also
// exist in Go assembly for AVX2+FMA+F16C (LevelAVX2) and, where it pays,
// AVX-512 (LevelAVX512: the f32/bf16/f16 dots, the MLX 4- and 8-bit rows
// and Q4_K, whose kernels use VNNI where the CPU has it, with the same
// bits, and the GGUF activation quantizer, with the pure-Go one's exact
// results; the other kernels run their AVX2 version at that level). Q2_K,
// Q3_K and Q5_K (the types real Q4_K_M, Q3_K_M and Q2_K files mix in) have
// one-row AVX2 kernels only, used at both levels.
// Default
// uses the widest level the CPU supports, detected once at start-up; every
// supported level can be selected with ForLevel, which is how the tests
// compare them.
//
// # Weights
//
// Weights are wrapped once, at load time, by NewDense, NewF32,
// NewMLXAffine or NewGGUF, which check the shape against the byte length;
// the kernels then trust it. Raw file bytes (memory-mapped or read, any
// alignment) are used in place: nothing widens a whole weight matrix.
//
// MLX affine weights are multiplied against f32 activations directly on
// the packed codes, Σ x·(s·q+b) = Σ_g (s_g·Σ x·q + b_g·Σ x), with Σ x per
// group computed once per activation row and the scales and biases widened
// a few rows at a time. GGUF weights are multiplied against the activation
// row quantized to 8 bits per block of 32 (an f32 scale per block, like
// llama.cpp's Q8_0 activations), with integer dot products inside each
// block; see GGUF for the error this adds (and GGUF.ExactActivations for
// the f32 alternative).
//
// # Batches
//
// A batched product shares each weight read among the activation rows. At
// LevelAVX512, BF16 and MLX 4-bit products run register tiles of 4
// activation rows by 4 weight rows with one accumulator per (activation
// row, weight row) pair, summed 16 columns at a time in column order: a
// BF16 chunk is widened once for 4 activation rows and an activation
// chunk loaded once for 4 weight rows (16 FMAs per 8 loads), and each
// tile of 4 weight rows is read from memory once for the whole batch
// (the BF16 tile prefetches the next tile's rows into L2 while it
// computes: with 4 rows streaming at once the hardware prefetcher alone
// left the FMAs waiting on memory, and prefetching into L1 evicted the
// activations). With more than 4 activation rows, each group of 4 runs
// over 32 weight rows before the next group does, so that the group
// stays in L1 and the rows in L2. Out of cache, on 2 threads, a batch of
// 8 went from 103 GFLOP/s to 117 with the chunks and to 152-183 with the
// L2 prefetch (184 in cache).
// MLX 4-bit rows are first dequantized (s·q+b, one FMA per code, in the
// permuted order of mlxPermute) 4 rows at a time into f32 scratch that
// stays in cache; batches under 4 dequantize in registers instead
// (mlx4Fused1x4AVX512, which prefetches the next 4 rows), with the same
// bits. BF16 batches under 4 take one weight row at a time
// (bf16Tile1x1AVX512, same bits), because a decode step streams the
// weights from memory and one row in order streams faster than 4 at once.
// The dense F32/F16, MLX 8-bit
// and GGUF Q8_0/Q4_K/Q6_K kernels take the rows 4 at a time, decoding
// each weight block once for the 4 rows and keeping the one-row kernel's
// accumulators and summation order per row.
//
// A single activation row, or a group of 4, against Q4_K (VNNI) or Q6_K
// weights runs the worker's whole range of weight rows in one assembly
// call: a Go call per weight row (and the store-forwarding stall of
// passing the activation rows' slices along) cost a tenth of a decode
// step and a seventh of a prefill.
//
// Either way an output's summation order depends only on its own row, so
// every output is bit-identical to a batch-1 product of its row at the
// same level (the model's batching tests rely on this;
// TestBatchRowsBitIdentical checks it for batches of 2 to 17 rows).
// Levels still differ from each other by rounding only.
//
// # Packed f32 matrices
//
// F32 weights are the encoders' (all-MiniLM-L6-v2 and the other
// sentence-transformers checkpoints ship f32), whose products have tens
// to thousands of activation rows. PackF32 copies such a matrix into
// panels of 16 weight rows stored column by column (Packed), and the
// AVX-512 kernels multiply it as outer products: per column, 4 activation
// values are broadcast and multiplied into 4 panels (a tile of 4 rows by
// 64 outputs, 16 accumulators, 8 loads per 16 FMAs), with no horizontal
// sums at the end. Each output is one accumulator summed in column order
// from 0, so every tile shape (4x64, 1x64, 4x16, 1x16) gives the same
// bits and products stay row-independent with nothing special at batch 1.
// A Pool hands out whole groups of 4 panels. MulPacked exposes the same
// kernels on matrices packed on the fly (PackRows, PackCols), which is
// how the encoder's attention computes q·kᵀ and p·v per head. GELU (the
// erf form) has an AVX-512 kernel too: a rational approximation of erf
// (within 7e-8) with FMAs and one division, instead of float64 math.Erf.
//
// # Threads
//
// Kernels.MatMul runs on the calling goroutine. A Pool splits output rows
// (Pool.MatMul) or any loop (Pool.Run) over the caller and a fixed set of
// worker goroutines, which Close stops. Between jobs the workers spin
// briefly before parking, because a decode step is hundreds of parallel
// sections microseconds apart and an OS wake-up per section left the
// cores idle a third of the time (decode 23 → 37 tokens/s on the Q4_K_M
// benchmark model, 2 cores).
package kernels
