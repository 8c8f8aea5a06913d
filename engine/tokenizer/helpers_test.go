package tokenizer_test

import (
	"encoding/json"
	"sync"
	"testing"

	"fusion/engine/tokenizer"
	"fusion/internal/testenv"
)

// tinyDoc describes a small byte-level BPE tokenizer.json: the 256 byte
// tokens have ids 0-255 (in byte order), extra tokens follow from 256.
type tinyDoc struct {
	Extra        []string // vocabulary tokens after the byte tokens, in the byte-level alphabet
	Merges       any      // []string or [][2]string
	IgnoreMerges bool
	Added        []map[string]any
	Normalizer   any
	PreTokenizer any
	Post         any
}

// byteToken returns the byte-level alphabet rune of a byte, as a string.
func byteToken(b byte) string {
	n := rune(256)
	for c := 0; c < 256; c++ {
		printable := (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)
		if c == int(b) {
			if printable {
				return string(rune(c))
			}
			return string(n)
		}
		if !printable {
			n++
		}
	}
	panic("unreachable")
}

func (d tinyDoc) json(t testing.TB) []byte {
	t.Helper()
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[byteToken(byte(b))] = b
	}
	for i, tok := range d.Extra {
		vocab[tok] = 256 + i
	}
	merges := d.Merges
	if merges == nil {
		merges = []string{}
	}
	pre := d.PreTokenizer
	if pre == nil {
		pre = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true}
	}
	added := d.Added
	if added == nil {
		added = []map[string]any{}
	}
	doc := map[string]any{
		"version":        "1.0",
		"added_tokens":   added,
		"normalizer":     d.Normalizer,
		"pre_tokenizer":  pre,
		"post_processor": d.Post,
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		"model": map[string]any{
			"type": "BPE", "vocab": vocab, "merges": merges, "ignore_merges": d.IgnoreMerges,
			"dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil, "end_of_word_suffix": nil,
			"fuse_unk": false, "byte_fallback": false,
		},
	}
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func (d tinyDoc) build(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.FromJSON(d.json(t))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// added returns an added_tokens entry.
func added(id int, content string, special, lstrip, rstrip, singleWord, normalized bool) map[string]any {
	return map[string]any{
		"id": id, "content": content, "special": special, "lstrip": lstrip, "rstrip": rstrip,
		"single_word": singleWord, "normalized": normalized,
	}
}

// loadedFixtures shares the real tokenizers between the tests of this
// binary: loading one takes seconds under the race detector.
var loadedFixtures sync.Map // name → func() (*tokenizer.Tokenizer, error)

// loadFixture returns the real tokenizer of a fixture directory (qwen3,
// llama3_1, llama3_2, deepseek_v3, gemma3, llama2, gptoss), loaded once.
func loadFixture(t testing.TB, name string) *tokenizer.Tokenizer {
	t.Helper()
	dir := testenv.TokenizerDir(t, name)
	load, _ := loadedFixtures.LoadOrStore(name, sync.OnceValues(func() (*tokenizer.Tokenizer, error) {
		return tokenizer.Load(dir)
	}))
	tok, err := load.(func() (*tokenizer.Tokenizer, error))()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
