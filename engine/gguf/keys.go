package gguf

// Standard metadata keys. Keys that start with "{arch}." are per
// architecture: build them with ArchKey.
const (
	KeyArchitecture = "general.architecture"
	KeyName         = "general.name"
	KeyAlignment    = "general.alignment"
	KeyFileType     = "general.file_type"
	KeyQuantVersion = "general.quantization_version"

	KeyTokenizerModel = "tokenizer.ggml.model"
	KeyTokenizerPre   = "tokenizer.ggml.pre"
	KeyTokens         = "tokenizer.ggml.tokens"
	KeyTokenType      = "tokenizer.ggml.token_type"
	KeyMerges         = "tokenizer.ggml.merges"
	KeyBOS            = "tokenizer.ggml.bos_token_id"
	KeyEOS            = "tokenizer.ggml.eos_token_id"
	KeyEOT            = "tokenizer.ggml.eot_token_id"
	KeyEOM            = "tokenizer.ggml.eom_token_id"
	KeyPAD            = "tokenizer.ggml.padding_token_id"
	KeyUNK            = "tokenizer.ggml.unknown_token_id"
	KeyAddBOS         = "tokenizer.ggml.add_bos_token"
	KeyAddEOS         = "tokenizer.ggml.add_eos_token"
	KeyChatTemplate   = "tokenizer.chat_template"

	// Suffixes of per-architecture keys.
	SuffixContextLength  = "context_length"
	SuffixEmbeddingLen   = "embedding_length"
	SuffixBlockCount     = "block_count"
	SuffixFeedForwardLen = "feed_forward_length"
	SuffixHeadCount      = "attention.head_count"
	SuffixHeadCountKV    = "attention.head_count_kv"
	SuffixKeyLength      = "attention.key_length"
	SuffixValueLength    = "attention.value_length"
	SuffixRMSEps         = "attention.layer_norm_rms_epsilon"
	SuffixRopeFreqBase   = "rope.freq_base"
	SuffixRopeDimCount   = "rope.dimension_count"
	SuffixVocabSize      = "vocab_size"

	// Mixture of experts.
	SuffixExpertCount       = "expert_count"
	SuffixExpertUsedCount   = "expert_used_count"
	SuffixExpertFFLength    = "expert_feed_forward_length"
	SuffixExpertWeightsNorm = "expert_weights_norm"

	// Sliding-window attention and RoPE scaling (gpt-oss: a window on
	// every other layer, yarn).
	SuffixSlidingWindow      = "attention.sliding_window"
	SuffixRopeScalingType    = "rope.scaling.type"
	SuffixRopeScalingFactor  = "rope.scaling.factor"
	SuffixRopeScalingOrigCtx = "rope.scaling.original_context_length"
	SuffixRopeYarnBetaFast   = "rope.scaling.yarn_beta_fast"
	SuffixRopeYarnBetaSlow   = "rope.scaling.yarn_beta_slow"
)

// ArchKey returns the per-architecture key arch + "." + suffix, e.g.
// ArchKey("qwen3", SuffixBlockCount) = "qwen3.block_count".
func ArchKey(arch, suffix string) string { return arch + "." + suffix }

// Token types of tokenizer.ggml.token_type (llama_token_type).
const (
	TokenNormal      = 1
	TokenUnknown     = 2
	TokenControl     = 3
	TokenUserDefined = 4
	TokenUnused      = 5
	TokenByte        = 6
)
