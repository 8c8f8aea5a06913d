package gguf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// Pre-tokenizer split patterns of the byte-level BPE families, keyed by
// tokenizer.ggml.pre. They are the Split regexes of the models'
// Hugging Face tokenizer.json files.
const (
	qwen2Pattern  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// DeepSeek V3 splits digit groups, then CJK runs, then words. The
	// character classes hold literal CR and LF, as in its tokenizer.json.
	deepseekDigits = `\p{N}{1,3}`
	deepseekCJK    = `[一-龥぀-ゟ゠-ヿ]+`
	// o200k (gpt-4o, gpt-oss): cased words with their contractions,
	// digit triples, punctuation runs keeping a trailing slash.
	o200kPattern  = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	deepseekWords = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
)

// preset is what tokenizer.ggml.pre implies for tokenizer.json.
type preset struct {
	patterns     []string
	nfc          bool // NFC normalizer (Qwen)
	ignoreMerges bool // whole-piece vocab hits skip BPE (Llama 3)
	trimOffsets  bool // ByteLevel pre-tokenizer trim_offsets, as the original files set it
}

func presetFor(pre string) (preset, error) {
	switch pre {
	case "qwen2":
		return preset{patterns: []string{qwen2Pattern}, nfc: true}, nil
	case "llama-bpe", "llama3":
		return preset{patterns: []string{llama3Pattern}, ignoreMerges: true, trimOffsets: true}, nil
	case "deepseek-v3":
		return preset{patterns: []string{deepseekDigits, deepseekCJK, deepseekWords}, trimOffsets: true}, nil
	case "gpt-4o": // llama.cpp's name for o200k, gpt-oss's too
		return preset{patterns: []string{o200kPattern}, ignoreMerges: true, trimOffsets: true}, nil
	}
	return preset{}, fmt.Errorf("%w: %s %q (known: qwen2, llama-bpe, llama3, deepseek-v3, gpt-4o)", ErrUnsupported, KeyTokenizerPre, pre)
}

// ChatTemplate returns tokenizer.chat_template, or "" when absent.
func (f *File) ChatTemplate() string {
	s, _ := f.Meta(KeyChatTemplate).AsString()
	return s
}

func (f *File) tokenID(key string) (int, bool) {
	n, ok := f.Meta(key).AsInt64()
	if !ok || n < 0 || n > 1<<31 {
		return 0, false
	}
	return int(n), true
}

// BOS returns tokenizer.ggml.bos_token_id.
func (f *File) BOS() (int, bool) { return f.tokenID(KeyBOS) }

// EOS returns tokenizer.ggml.eos_token_id.
func (f *File) EOS() (int, bool) { return f.tokenID(KeyEOS) }

// StopTokens returns the distinct ids of the end-of-sequence, end-of-turn
// and end-of-message tokens that are set, in that order, then, for
// gpt-oss's o200k_harmony vocabulary (one with <|return|> and <|call|>),
// those two and <|endoftext|>: the end-of-generation tokens llama.cpp
// finds by name there (and gpt-oss's generation_config.json lists), a
// tool call ending at <|call|>. (llama.cpp drops <|end|>, which only ends
// a message, from them.)
func (f *File) StopTokens() []int {
	var out []int
	add := func(id int) {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	for _, k := range []string{KeyEOS, KeyEOT, KeyEOM} {
		if id, ok := f.tokenID(k); ok {
			add(id)
		}
	}
	tokens, _ := f.Meta(KeyTokens).AsStrings()
	ret, call := slices.Index(tokens, "<|return|>"), slices.Index(tokens, "<|call|>")
	if ret >= 0 && call >= 0 {
		add(ret)
		add(call)
		if id := slices.Index(tokens, "<|endoftext|>"); id >= 0 {
			add(id)
		}
	}
	return out
}

// tokenizer.json pieces, in the field order Hugging Face writes them.
type (
	hfTokenizer struct {
		Version       string       `json:"version"`
		Truncation    any          `json:"truncation"`
		Padding       any          `json:"padding"`
		AddedTokens   []addedToken `json:"added_tokens"`
		Normalizer    any          `json:"normalizer"`
		PreTokenizer  any          `json:"pre_tokenizer"`
		PostProcessor any          `json:"post_processor"`
		Decoder       any          `json:"decoder"`
		Model         bpeModel     `json:"model"`
	}
	addedToken struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	}
	bpeModel struct {
		Type                    string       `json:"type"`
		Dropout                 any          `json:"dropout"`
		UnkToken                any          `json:"unk_token"`
		ContinuingSubwordPrefix any          `json:"continuing_subword_prefix"`
		EndOfWordSuffix         any          `json:"end_of_word_suffix"`
		FuseUnk                 bool         `json:"fuse_unk"`
		ByteFallback            bool         `json:"byte_fallback"`
		IgnoreMerges            bool         `json:"ignore_merges"`
		Vocab                   orderedVocab `json:"vocab"`
		Merges                  []string     `json:"merges"`
	}
	byteLevel struct {
		Type           string `json:"type"`
		AddPrefixSpace bool   `json:"add_prefix_space"`
		TrimOffsets    bool   `json:"trim_offsets"`
		UseRegex       bool   `json:"use_regex"`
	}
	split struct {
		Type     string            `json:"type"`
		Pattern  map[string]string `json:"pattern"`
		Behavior string            `json:"behavior"`
		Invert   bool              `json:"invert"`
	}
	typeOnly struct {
		Type string `json:"type"`
	}
	preSequence struct {
		Type          string `json:"type"`
		Pretokenizers []any  `json:"pretokenizers"`
	}
	postSequence struct {
		Type       string `json:"type"`
		Processors []any  `json:"processors"`
	}
	templateProcessing struct {
		Type          string                    `json:"type"`
		Single        []templatePiece           `json:"single"`
		Pair          []templatePiece           `json:"pair"`
		SpecialTokens map[string]templateTokens `json:"special_tokens"`
	}
	// templatePiece is {"SpecialToken": {...}} or {"Sequence": {...}}.
	templatePiece   map[string]templatePieceID
	templatePieceID struct {
		ID     string `json:"id"`
		TypeID int    `json:"type_id"`
	}
	templateTokens struct {
		ID     string   `json:"id"`
		IDs    []int    `json:"ids"`
		Tokens []string `json:"tokens"`
	}
)

// orderedVocab marshals token → id in id order (as Hugging Face does).
type orderedVocab struct {
	tokens []string
	ids    []int
}

func (v orderedVocab) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	b.WriteByte('{')
	for i, tok := range v.tokens {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := enc.Encode(tok); err != nil {
			return nil, err
		}
		b.Truncate(b.Len() - 1) // Encode's newline
		fmt.Fprintf(&b, ":%d", v.ids[i])
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// TokenizerJSON synthesises a Hugging Face tokenizer.json from the
// tokenizer.ggml.* metadata of a byte-level BPE ("gpt2") model: the BPE
// vocabulary and merges, control (3) and user-defined (4) tokens as added
// tokens (special for control), the pre-tokenizer of tokenizer.ggml.pre,
// a BOS/EOS TemplateProcessing when add_bos_token/add_eos_token say so,
// and the ByteLevel decoder.
func (f *File) TokenizerJSON() ([]byte, error) {
	doc, err := f.tokenizerDoc()
	if err != nil {
		return nil, fmt.Errorf("gguf: %s: tokenizer: %w", f.Name, err)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("gguf: %s: tokenizer: %w", f.Name, err)
	}
	return b.Bytes(), nil
}

func (f *File) tokenizerDoc() (*hfTokenizer, error) {
	model, _ := f.Meta(KeyTokenizerModel).AsString()
	if model != "gpt2" && model != "gemma4" {
		return nil, fmt.Errorf("%w: %s %q (only byte-level BPE, \"gpt2\", and Gemma 4's, \"gemma4\")", ErrUnsupported, KeyTokenizerModel, model)
	}
	tokens, ok := f.Meta(KeyTokens).AsStrings()
	if !ok || len(tokens) == 0 {
		return nil, fmt.Errorf("%w: %s is missing or not a string array", ErrInvalid, KeyTokens)
	}
	types := make([]int64, len(tokens))
	if v, present := f.Lookup(KeyTokenType); present {
		tt, ok := v.AsInt64s()
		if !ok || len(tt) != len(tokens) {
			return nil, fmt.Errorf("%w: %s has %d entries for %d tokens", ErrInvalid, KeyTokenType, len(tt), len(tokens))
		}
		types = tt
	}
	var merges []string
	if v, present := f.Lookup(KeyMerges); present {
		if merges, ok = v.AsStrings(); !ok {
			return nil, fmt.Errorf("%w: %s is not a string array", ErrInvalid, KeyMerges)
		}
	}
	if model == "gemma4" {
		return f.gemma4Doc(tokens, types, merges)
	}
	pre, _ := f.Meta(KeyTokenizerPre).AsString()
	p, err := presetFor(pre)
	if err != nil {
		return nil, err
	}

	doc := &hfTokenizer{Version: "1.0", AddedTokens: []addedToken{}}
	vocab := orderedVocab{}
	seen := make(map[string]bool, len(tokens))
	for id, tok := range tokens {
		if types[id] == TokenControl || types[id] == TokenUserDefined {
			doc.AddedTokens = append(doc.AddedTokens, addedToken{ID: id, Content: tok, Special: types[id] == TokenControl})
		}
		// Every token, added ones included, goes into the BPE vocabulary:
		// the tokenizers library ignores an added token's id unless its
		// content is in the vocabulary, and numbers it after the vocabulary
		// instead (wrong for DeepSeek's specials at ids 0–2, or for padded
		// vocabularies). Added tokens are split off before BPE runs, so the
		// entries cannot change how text is tokenized.
		if seen[tok] {
			continue // a duplicate string keeps its first id
		}
		seen[tok] = true
		vocab.tokens = append(vocab.tokens, tok)
		vocab.ids = append(vocab.ids, id)
	}
	if merges == nil {
		merges = []string{}
	}
	doc.Model = bpeModel{Type: "BPE", IgnoreMerges: p.ignoreMerges, Vocab: vocab, Merges: merges}

	if p.nfc {
		doc.Normalizer = typeOnly{Type: "NFC"}
	}
	var pretok []any
	for _, pat := range p.patterns {
		pretok = append(pretok, split{Type: "Split", Pattern: map[string]string{"Regex": pat}, Behavior: "Isolated"})
	}
	pretok = append(pretok, byteLevel{Type: "ByteLevel", TrimOffsets: p.trimOffsets})
	doc.PreTokenizer = preSequence{Type: "Sequence", Pretokenizers: pretok}
	doc.Decoder = byteLevel{Type: "ByteLevel", AddPrefixSpace: true, TrimOffsets: true, UseRegex: true}

	post, err := f.postProcessor(tokens)
	if err != nil {
		return nil, err
	}
	doc.PostProcessor = post
	return doc, nil
}

// postProcessor is ByteLevel, followed by a TemplateProcessing that adds
// BOS and/or EOS when the metadata asks for them.
func (f *File) postProcessor(tokens []string) (any, error) {
	bl := byteLevel{Type: "ByteLevel", AddPrefixSpace: true, UseRegex: true}
	addBOS, _ := f.Meta(KeyAddBOS).AsBool()
	addEOS, _ := f.Meta(KeyAddEOS).AsBool()
	if !addBOS && !addEOS {
		return bl, nil
	}
	specials := map[string]templateTokens{}
	special := func(key, addKey string, typeID int) (templatePiece, error) {
		id, ok := f.tokenID(key)
		if !ok || id >= len(tokens) {
			return nil, fmt.Errorf("%w: %s is true but %s is missing or out of range", ErrInvalid, addKey, key)
		}
		tok := tokens[id]
		specials[tok] = templateTokens{ID: tok, IDs: []int{id}, Tokens: []string{tok}}
		return templatePiece{"SpecialToken": {ID: tok, TypeID: typeID}}, nil
	}
	seq := func(name string, typeID int) templatePiece {
		return templatePiece{"Sequence": {ID: name, TypeID: typeID}}
	}
	build := func(name string, typeID int) ([]templatePiece, error) {
		var out []templatePiece
		if addBOS {
			p, err := special(KeyBOS, KeyAddBOS, typeID)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
		out = append(out, seq(name, typeID))
		if addEOS {
			p, err := special(KeyEOS, KeyAddEOS, typeID)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
		return out, nil
	}
	single, err := build("A", 0)
	if err != nil {
		return nil, err
	}
	second, err := build("B", 1)
	if err != nil {
		return nil, err
	}
	tp := templateProcessing{
		Type:          "TemplateProcessing",
		Single:        single,
		Pair:          append(append([]templatePiece{}, single...), second...),
		SpecialTokens: specials,
	}
	return postSequence{Type: "Sequence", Processors: []any{bl, tp}}, nil
}

// Gemma 4's tokenizer (tokenizer.ggml.model "gemma4") is SentencePiece-style
// BPE over raw UTF-8, as in its tokenizer.json: spaces become "▁" before
// the merges, which run over whole space-ended pieces, and a character
// missing from the vocabulary falls back to its <0xXX> byte tokens.
type (
	replaceStep struct {
		Type    string            `json:"type"`
		Pattern map[string]string `json:"pattern"`
		Content string            `json:"content"`
	}
	decoderSequence struct {
		Type     string `json:"type"`
		Decoders []any  `json:"decoders"`
	}
)

// gemma4Doc builds Gemma 4's tokenizer.json. Its control tokens and the
// ones llama.cpp's converter marks user-defined so they render (<|channel>,
// <|tool_call>, <|"|>, ...) are special added tokens, as in the original.
func (f *File) gemma4Doc(tokens []string, types []int64, merges []string) (*hfTokenizer, error) {
	doc := &hfTokenizer{Version: "1.0", AddedTokens: []addedToken{}}
	vocab := orderedVocab{}
	seen := make(map[string]bool, len(tokens))
	for id, tok := range tokens {
		if types[id] == TokenControl || types[id] == TokenUserDefined {
			doc.AddedTokens = append(doc.AddedTokens, addedToken{ID: id, Content: tok, Special: true})
		}
		if seen[tok] {
			continue
		}
		seen[tok] = true
		vocab.tokens = append(vocab.tokens, tok)
		vocab.ids = append(vocab.ids, id)
	}
	if merges == nil {
		merges = []string{}
	}
	var unk any
	if id, ok := f.tokenID(KeyUNK); ok && id < len(tokens) {
		unk = tokens[id]
	}
	doc.Model = bpeModel{Type: "BPE", UnkToken: unk, FuseUnk: true, ByteFallback: true, Vocab: vocab, Merges: merges}
	doc.Normalizer = replaceStep{Type: "Replace", Pattern: map[string]string{"String": " "}, Content: "▁"}
	doc.PreTokenizer = split{Type: "Split", Pattern: map[string]string{"String": " "}, Behavior: "MergedWithPrevious"}
	doc.Decoder = decoderSequence{Type: "Sequence", Decoders: []any{
		replaceStep{Type: "Replace", Pattern: map[string]string{"String": "▁"}, Content: " "},
		typeOnly{Type: "ByteFallback"}, typeOnly{Type: "Fuse"},
	}}
	post, err := f.postProcessor(tokens)
	if err != nil {
		return nil, err
	}
	if seq, ok := post.(postSequence); ok { // no ByteLevel step: only the template
		post = seq.Processors[1]
	} else {
		post = nil
	}
	doc.PostProcessor = post
	return doc, nil
}
