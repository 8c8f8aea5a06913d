package demo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"fusion/engine/chattemplate"
)

// Tokenizer file names.
const (
	TokenizerFile       = "tokenizer.json"
	TokenizerConfigFile = "tokenizer_config.json"
)

// qwen2Pattern is the Qwen2/Qwen3 pre-tokenizer regex.
const qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// maxMerges caps the built-in tokenizer's merges (the corpus yields ~350).
const maxMerges = 512

// AddedToken is an entry of tokenizer.json's added_tokens.
type AddedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	Lstrip     bool   `json:"lstrip"`
	Rstrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// Tokenizer is a model's tokenizer as structured data (what a GGUF writer
// needs for its tokenizer.ggml.* keys) and as the files that carry it.
type Tokenizer struct {
	Tokens       []string    // every token by id, added tokens included ("" for unused ids)
	Merges       [][2]string // BPE merges by rank
	Added        []AddedToken
	BOS, EOS     int   // -1 when the tokenizer has none
	Pad          int   // -1 when the tokenizer has none
	EOSIDs       []int // every end-of-generation id, EOS first
	ChatTemplate string
	Pre          string            // pre-tokenizer family: "qwen2", "llama-bpe", "gpt-4o" (o200k), or "" if unknown
	Files        map[string][]byte // file name -> contents, written into the model directory
}

// builtinSpecials are the added tokens of the built-in tokenizer, with
// Qwen's special flags (<think>, <tool_call>, ... are not special, so they
// survive skip_special_tokens).
var builtinSpecials = []struct {
	content string
	special bool
}{
	{"<|endoftext|>", true}, {"<|im_start|>", true}, {"<|im_end|>", true},
	{"<think>", false}, {"</think>", false}, {"<tool_call>", false}, {"</tool_call>", false},
	{"<tool_response>", false}, {"</tool_response>", false},
}

// builtinTokenizer trains the byte-level BPE tokenizer on the built-in
// corpus and renders its tokenizer.json and tokenizer_config.json in the
// layout of Qwen3's, with the chat template tmpl.
func builtinTokenizer(maxLen int, tmpl string) (*Tokenizer, error) {
	table, order := byteAlphabet()
	tk := &Tokenizer{Merges: trainBPE(corpus, maxMerges), Pre: "qwen2", ChatTemplate: tmpl}
	ids := make(map[string]int)
	add := func(s string) {
		if _, ok := ids[s]; !ok {
			ids[s] = len(tk.Tokens)
			tk.Tokens = append(tk.Tokens, s)
		}
	}
	for _, b := range order {
		add(string(table[b]))
	}
	for _, m := range tk.Merges {
		add(m[0] + m[1])
	}
	vocab := make(object, len(tk.Tokens))
	for i, s := range tk.Tokens {
		vocab[i] = member{s, i}
	}
	decoder := object{}
	for _, s := range builtinSpecials {
		at := AddedToken{ID: len(tk.Tokens), Content: s.content, Special: s.special}
		tk.Added = append(tk.Added, at)
		tk.Tokens = append(tk.Tokens, s.content)
		decoder = append(decoder, member{strconv.Itoa(at.ID), object{
			{"content", at.Content}, {"lstrip", false}, {"normalized", false}, {"rstrip", false}, {"single_word", false}, {"special", at.Special},
		}})
	}
	id := func(s string) int {
		for _, a := range tk.Added {
			if a.Content == s {
				return a.ID
			}
		}
		return -1
	}
	tk.BOS, tk.EOS, tk.Pad = -1, id("<|im_end|>"), id("<|endoftext|>")
	tk.EOSIDs = []int{tk.EOS, tk.Pad}

	byteLevel := object{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}
	tokJSON := object{
		{"version", "1.0"},
		{"truncation", nil},
		{"padding", nil},
		{"added_tokens", tk.Added},
		{"normalizer", object{{"type", "NFC"}}},
		{"pre_tokenizer", object{{"type", "Sequence"}, {"pretokenizers", []any{
			object{{"type", "Split"}, {"pattern", object{{"Regex", qwen2Pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
			byteLevel,
		}}}},
		{"post_processor", byteLevel},
		{"decoder", byteLevel},
		{"model", object{
			{"type", "BPE"}, {"dropout", nil}, {"unk_token", nil}, {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""},
			{"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
			{"vocab", vocab}, {"merges", tk.Merges},
		}},
	}
	cfgJSON := object{
		{"add_bos_token", false},
		{"add_prefix_space", false},
		{"added_tokens_decoder", decoder},
		{"additional_special_tokens", []string{"<|im_start|>", "<|im_end|>"}},
		{"bos_token", nil},
		{"chat_template", tmpl},
		{"clean_up_tokenization_spaces", false},
		{"eos_token", "<|im_end|>"},
		{"errors", "replace"},
		{"model_max_length", maxLen},
		{"pad_token", "<|endoftext|>"},
		{"split_special_tokens", false},
		{"tokenizer_class", "Qwen2Tokenizer"},
		{"unk_token", nil},
	}
	tk.Files = make(map[string][]byte)
	for name, v := range map[string]any{TokenizerFile: tokJSON, TokenizerConfigFile: cfgJSON} {
		b, err := marshal(v, true)
		if err != nil {
			return nil, fmt.Errorf("demo: %s: %w", name, err)
		}
		tk.Files[name] = b
	}
	return tk, nil
}

// copiedTokenizerFiles are taken from --vocab-from when present.
var copiedTokenizerFiles = []string{TokenizerFile, TokenizerConfigFile, "special_tokens_map.json", "chat_template.jinja"}

// endTokens are the end-of-turn and end-of-text tokens a generation config
// lists besides the tokenizer's eos_token, when the vocabulary has them.
var endTokens = []string{"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>", "<end_of_turn>", "<eos>", "<|call|>", "<turn|>"}

// loadTokenizer reads a real tokenizer from dir (tokenizer.json and
// tokenizer_config.json, plus special_tokens_map.json and
// chat_template.jinja if present) and keeps the files to copy them.
func loadTokenizer(dir string) (*Tokenizer, error) {
	tk := &Tokenizer{Files: make(map[string][]byte), BOS: -1, EOS: -1, Pad: -1}
	fromGGUF, err := ggufTokenizerFiles(dir)
	if err != nil {
		return nil, err
	}
	for _, name := range copiedTokenizerFiles {
		if b, ok := fromGGUF[name]; ok {
			tk.Files[name] = b
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) && name != TokenizerFile && name != TokenizerConfigFile {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("demo: tokenizer: %w", err)
		}
		tk.Files[name] = b
	}
	var tj struct {
		AddedTokens  []AddedToken    `json:"added_tokens"`
		PreTokenizer json.RawMessage `json:"pre_tokenizer"`
		Model        struct {
			Type   string          `json:"type"`
			Vocab  map[string]int  `json:"vocab"`
			Merges json.RawMessage `json:"merges"`
		} `json:"model"`
	}
	path := filepath.Join(dir, TokenizerFile)
	if err := json.Unmarshal(tk.Files[TokenizerFile], &tj); err != nil {
		return nil, fmt.Errorf("demo: %s: %w", path, err)
	}
	if tj.Model.Type != "BPE" || len(tj.Model.Vocab) == 0 {
		return nil, fmt.Errorf("demo: %s: want a BPE model with a vocabulary, found type %q with %d tokens", path, tj.Model.Type, len(tj.Model.Vocab))
	}
	size := 0
	for _, id := range tj.Model.Vocab {
		size = max(size, id+1)
	}
	for _, a := range tj.AddedTokens {
		size = max(size, a.ID+1)
	}
	if size > 1<<22 {
		return nil, fmt.Errorf("demo: %s: token id %d is absurd", path, size-1)
	}
	tk.Tokens = make([]string, size)
	for s, id := range tj.Model.Vocab {
		if id < 0 {
			return nil, fmt.Errorf("demo: %s: negative id for %q", path, s)
		}
		tk.Tokens[id] = s
	}
	for _, a := range tj.AddedTokens {
		if a.ID < 0 {
			return nil, fmt.Errorf("demo: %s: negative id for %q", path, a.Content)
		}
		tk.Tokens[a.ID] = a.Content
	}
	tk.Added = tj.AddedTokens
	if tk.Merges, err = parseMerges(tj.Model.Merges); err != nil {
		return nil, fmt.Errorf("demo: %s: %w", path, err)
	}
	switch pre := string(tj.PreTokenizer); {
	case strings.Contains(pre, `\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}`):
		tk.Pre = "gpt-4o" // o200k (gpt-oss): llama.cpp's name; no GGUF preset here
	case strings.Contains(pre, `\\p{N}{1,3}`):
		tk.Pre = "llama-bpe"
	case strings.Contains(pre, `\\p{N}|`):
		tk.Pre = "qwen2"
	}
	if err := tk.readConfig(dir); err != nil {
		return nil, err
	}
	return tk, nil
}

// parseMerges accepts both spellings: "a b" strings and ["a", "b"] pairs.
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		return pairs, nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err != nil {
		return nil, fmt.Errorf("merges: %w", err)
	}
	pairs = make([][2]string, len(strs))
	for i, s := range strs {
		a, b, ok := strings.Cut(s, " ")
		if !ok {
			return nil, fmt.Errorf("merge %d %q has no space", i, s)
		}
		pairs[i] = [2]string{a, b}
	}
	return pairs, nil
}

// readConfig takes the special tokens and the chat template from
// tokenizer_config.json (or chat_template.jinja).
func (tk *Tokenizer) readConfig(dir string) error {
	path := filepath.Join(dir, TokenizerConfigFile)
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(tk.Files[TokenizerConfigFile], &cfg); err != nil {
		return fmt.Errorf("demo: %s: %w", path, err)
	}
	ids := make(map[string]int, len(tk.Tokens))
	for id, s := range tk.Tokens {
		if s != "" {
			ids[s] = id
		}
	}
	special := func(key string) int {
		var s string
		var obj struct{ Content string }
		raw := cfg[key]
		if json.Unmarshal(raw, &s) != nil && json.Unmarshal(raw, &obj) == nil {
			s = obj.Content
		}
		if id, ok := ids[s]; ok && s != "" {
			return id
		}
		return -1
	}
	tk.BOS, tk.EOS, tk.Pad = special("bos_token"), special("eos_token"), special("pad_token")
	if tk.EOS < 0 {
		return fmt.Errorf("demo: %s: eos_token is missing or not in the vocabulary", path)
	}
	tk.EOSIDs = []int{tk.EOS}
	for _, s := range endTokens {
		if id, ok := ids[s]; ok && id != tk.EOS {
			tk.EOSIDs = append(tk.EOSIDs, id)
		}
	}
	var tmpl string
	if json.Unmarshal(cfg["chat_template"], &tmpl) != nil {
		var named []struct{ Name, Template string }
		if json.Unmarshal(cfg["chat_template"], &named) == nil {
			for _, n := range named {
				if n.Name == "default" || tmpl == "" {
					tmpl = n.Template
				}
			}
		}
	}
	if tmpl == "" {
		tmpl = string(tk.Files["chat_template.jinja"])
	}
	if _, harmony := ids["<|channel|>"]; tmpl == "" && harmony {
		// gpt-oss's tokenizer package ships no template: its models get
		// our harmony one, written as chat_template.jinja.
		tmpl = chattemplate.Harmony
		tk.Files["chat_template.jinja"] = []byte(tmpl)
	}
	tk.ChatTemplate = tmpl
	return nil
}
