// Package backend is the op set architectures are written against, and the
// contract every compute backend implements.
//
// A Backend turns weights into device handles (Weight, Vector), creates
// per-sequence KV caches, and opens Steps. A Step is one forward pass: the
// model code calls its ops (Embed, Linear, RMSNorm, RoPE, Attention, Add,
// SwiGLU, Rows; ExpertLinear and MixRows for mixtures of experts) to build
// the pass, and Read is the point where values must exist. The ops mirror
// mlx-c's (take, matmul / quantized_matmul, gather_qmm,
// fast.rms_norm, fast.rope with an offset, fast.scaled_dot_product_attention
// with GQA and a causal mask, elementwise ops), so two very different
// backends fit behind it:
//
//   - the CPU backend (package cpu) evaluates every op eagerly over float32
//     buffers, widening or dequantizing weights inside its matmul kernels;
//   - an MLX backend builds a lazy graph per Step and evaluates it at Read
//     (or at an explicit Eval, e.g. between prefill chunks).
//
// Activations are matrices [rows, cols]: one row per token of the step,
// the tokens of all sequences of a Batch concatenated, and the features of
// all heads side by side in a row. Ops that need heads (RMSNorm over a
// head, RoPE, Attention) take the head width from their arguments. A
// backend may keep its arrays in any layout; only Read and Input exchange
// float32 values with the caller.
//
// Errors: ops do not return errors, so model code reads like the math. A
// shape mismatch is a bug in the model code and panics; a failure of the
// backend itself (an MLX error, memory) is recorded by the Step and
// returned by Read, Eval and Err.
package backend
