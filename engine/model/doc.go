// Package model runs decoder-only transformers (llama, qwen2, qwen3) on a
// compute backend: it loads a model directory (Hugging Face / MLX
// safetensors) or a GGUF file, builds each architecture's blocks over the
// op set of package backend, and runs batched forward passes over any
// contiguous range of layers.
//
// Each architecture is one short file (llama.go, qwen2.go, qwen3.go) that
// reads like the math, in the spirit of mlx-lm's model files; what they
// share (the MLP, the per-layer frame of ops) is in nn.go, RoPE variants
// in rope.go. Forward takes several sequences at different positions in
// one step, each with its own KV cache and number of new tokens, and
// returns the hidden state (for the next pipeline stage) or the logits.
package model
