// Package engine runs models. Its sub-packages read model files (tensor,
// safetensors, gguf, modelfile), turn text into tokens and back
// (tokenizer), render chat templates (chattemplate) and write demo models
// (demo). The scheduler, caches, sampler, parsers and backends join them as
// later issues land.
package engine
