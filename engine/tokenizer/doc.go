// Package tokenizer turns text into token ids and back with the BPE
// tokenizers of Hugging Face `tokenizer.json` files — byte-level, as used by
// Qwen2/3, Llama 3 and DeepSeek V3, and SentencePiece-style with "▁" spaces
// and <0xNN> byte fallback, as used by Gemma 3, Llama 2 and Mistral — and
// WordPiece (BERT), and Unigram (SentencePiece unigram: XLM-R, with its
// Precompiled normalizer), and produces the same ids as the HF `tokenizers`
// library.
//
// Encoding runs the HF pipeline: added tokens are matched first on the raw
// text (longest match wins); the text between them is normalized (NFC,
// Replace, Prepend, ...), pre-tokenized (Split regexes, then ByteLevel; or
// Metaspace), and each piece goes through BPE merges; the post-processor may add a BOS token. The pre-tokenizer
// patterns of Qwen2/3, Llama 3 and GPT-2 run on hand-written scanners, any
// other pattern on a backtracking regex engine; both use Unicode 16.0 general
// categories, as the reference does.
//
// Decoding maps ids back to bytes (byte-level alphabet, "▁", byte-fallback
// runs) and then to UTF-8 text; StreamDecoder does it one id at a time and
// never emits a partial character.
//
// Load reads a model directory (tokenizer.json, tokenizer_config.json,
// generation_config.json, config.json, special_tokens_map.json,
// chat_template.jinja); FromJSON builds a tokenizer from a tokenizer.json
// document alone. A Tokenizer is safe for concurrent use.
package tokenizer
