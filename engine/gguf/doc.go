// Package gguf reads and writes GGUF files (versions 2 and 3), the
// single-file weight format of llama.cpp and ggml.
//
// A GGUF file is a header of typed metadata key/value pairs and tensor
// descriptions, followed by an aligned data section holding the tensor
// bytes. Open validates the whole header before trusting any of it (GGUF
// files come from strangers) and returns tensors as tensor.Tensor views
// into one buffer per file, read into memory or memory-mapped.
//
// Besides the container the package holds:
//   - dequantization of F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K,
//     Q3_K, Q4_K, Q5_K, Q6_K, Q8_K and MXFP4 blocks to float32, bit for
//     bit as ggml's reference dequantize_row_* functions, and MXFP4
//     blocks moved to and from MLX's mxfp4 layout value for value;
//   - reference quantization of float32 rows to Q8_0, Q4_0, Q4_1, Q5_0,
//     Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and MXFP4, byte for byte what ggml's
//     quantize_row_*_ref (llama-quantize without an importance matrix)
//     produces;
//   - the mapping between Hugging Face and GGUF tensor names (a mixture's
//     router and stacked ffn_*_exps experts included) and architecture
//     names (qwen3_moe ↔ qwen3moe, gpt_oss ↔ gpt-oss, with gpt-oss's own
//     tensor names), and the Q/K row permutation llama.cpp
//     applies to the llama architecture;
//   - a Hugging Face tokenizer.json synthesised from the tokenizer.ggml.*
//     metadata (byte-level BPE, "gpt2", and Gemma 4's SentencePiece-style
//     BPE with byte fallback, "gemma4"), the chat template, and a
//     config.json-like ModelConfig (with a mixture's expert_* keys).
//
// Shapes are outermost-first (like safetensors and PyTorch); GGUF stores
// dimensions innermost-first and the reader and writer reverse them. A
// "row" is the innermost dimension, the unit that quantization blocks never
// straddle.
package gguf
