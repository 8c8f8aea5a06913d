package demo

// LoadTokenizer reads the Hugging Face tokenizer of a model directory
// (tokenizer.json and tokenizer_config.json, plus special_tokens_map.json
// and chat_template.jinja if present) as structured data: what a GGUF
// writer needs for its tokenizer.ggml.* keys.
func LoadTokenizer(dir string) (*Tokenizer, error) { return loadTokenizer(dir) }
