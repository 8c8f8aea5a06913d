// Package demo builds small random-weight models in the exact on-disk
// format of Hugging Face / mlx-community checkpoints (config.json,
// generation_config.json, model.safetensors, tokenizer.json,
// tokenizer_config.json), optionally MLX affine-quantized, for tests and
// for `make run`. A model is first built in memory (Build), so that other
// writers (GGUF) can serialise the same weights, then written (Write).
//
// Weights are deterministic for a given seed, drawn so that the model's
// outputs vary like a small language model's (init.go); with StopAfter the
// model also ends its answers on its own (stop.go). Unless a real tokenizer is
// given, the model carries its own byte-level BPE tokenizer, trained on a
// built-in snippet of English and code, with Qwen-style special tokens and
// a ChatML chat template of our own: Qwen3's kind (<tool_call> JSON), or
// for qwen3_5 and qwen3_5_moe Qwen3.5's kind (<function=…><parameter=…>
// calls, thinking by default). Options.TemplateFrom (create-demo
// --template-from) writes a real model's template instead, as
// chat_template.jinja. gpt-oss's tokenizer package ships no chat
// template: a model built on it gets chattemplate.Harmony, and <|call|>
// among its end tokens. Architectures: llama, qwen3 and gemma3_text
// (gemma.go; safetensors only, with Gemma's norm layout and sliding-window
// settings), gemma4_text (gemma4.go) and the families of archList. GGUF
// (gguf.go) is written for llama, qwen3, qwen3_moe and gpt_oss (gpt-oss's
// layout as llama.cpp's converter writes it, MXFP4 experts: gguf_gptoss.go).
package demo
