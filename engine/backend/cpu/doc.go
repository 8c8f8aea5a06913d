// Package cpu is the pure-Go compute backend: it implements the op set of
// package backend eagerly, over float32 activations, with the matmul and
// vector kernels of package kernels.
//
// Weights are used where the model file put them (read or memory-mapped):
// F16/BF16 matrices are widened inside the dot products, MLX affine
// 4/8-bit and GGUF Q8_0/Q4_0/Q2_K…Q6_K matrices are multiplied on their
// packed codes; nothing keeps a float32 copy (unless Options.Dequantize
// asks for one, which reference runs do). F32 matrices are repacked once
// at load into the panels of kernels.Packed when the kernels multiply
// those with SIMD (AVX-512): a copy of the same size (plus the last
// panel's padding), after which the file's bytes are not read. Matrix products run on a
// kernels.Pool over all cores; attention, RoPE and the elementwise ops
// split their rows over the same number of goroutines.
//
// Every op writes its result into a per-step arena of float32 buffers, so a
// forward pass allocates nothing once the arena has grown to the size of
// the largest pass; Step.Release after each layer bounds that size to one
// layer's temporaries. KV caches hold float32 keys and values in blocks of
// BlockSize positions (see KVCache).
//
// Row independence: every output row of every op depends only on the same
// row of its inputs (and, for attention, on the row's own sequence), and
// is computed by the same instructions whatever else is in the batch. So a
// sequence gives bit-identical logits alone or batched with others, and a
// model split into layer ranges gives bit-identical logits to the whole.
package cpu
