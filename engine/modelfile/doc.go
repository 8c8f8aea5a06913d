// Package modelfile opens a Hugging Face / mlx-community model directory:
// config.json (typed and validated), generation_config.json, the weights
// (model.safetensors or shards listed by model.safetensors.index.json),
// MLX affine quantization (the config's "quantization" block with its
// per-layer overrides, and the packed weight/scales/biases triples), and
// the discovery of models in a models directory.
//
// Everything read from disk is validated before it is trusted: unknown
// architectures, impossible sizes, shard indexes naming missing files or
// tensors, and quantized tensors whose shapes disagree all fail with errors
// that name the file and the problem.
package modelfile
