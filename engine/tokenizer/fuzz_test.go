package tokenizer

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// fuzzSeeds are tokenizer.json documents, valid and not, that start the
// fuzzer off.
var fuzzSeeds = []string{
	`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3}, "merges": ["a b"]},
	  "added_tokens": [{"id": 4, "content": "<s>", "special": true, "lstrip": true, "rstrip": false, "single_word": false, "normalized": false}],
	  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": true, "use_regex": true},
	  "decoder": {"type": "ByteLevel"}}`,
	`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]], "ignore_merges": true},
	  "added_tokens": [{"id": 3, "content": "<x>", "special": false, "normalized": true, "single_word": true, "rstrip": true}],
	  "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "NFKD"}]},
	  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
	    {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": false},
	    {"type": "Split", "pattern": {"Regex": "\\s+(?!\\S)|[\\p{L}\\p{M}]+"}, "behavior": "MergedWithNext", "invert": true},
	    {"type": "Split", "pattern": {"String": "b"}, "behavior": "Contiguous"},
	    {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
	  "post_processor": {"type": "Sequence", "processors": [{"type": "ByteLevel"},
	    {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<x>"}}, {"Sequence": {"id": "A"}}, {"SpecialToken": {"id": "<x>"}}],
	     "special_tokens": {"<x>": {"id": "<x>", "ids": [3], "tokens": ["<x>"]}}}]},
	  "decoder": {"type": "Sequence", "decoders": [{"type": "ByteLevel"}]}}`,
	`{"model": {"type": "BPE", "vocab": {"a": 0, "<unk>": 1, "<0x62>": 2}, "merges": [], "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true},
	  "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "` + patternLlama3 + `"}, "behavior": "Removed"},
	  "post_processor": {"type": "RobertaProcessing", "cls": ["a", 0], "sep": ["<unk>", 1]}}`,
	`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": null}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "` + patternQwen2 + `"}, "behavior": "Isolated"}}`,
	`{"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}}`,
	`{"model": {"type": "BPE", "vocab": {"a": 99999999}, "merges": []}}`,
	`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a a"]}}`,
	`{"model": {"type": "WordPiece", "vocab": {}}}`,
	`{"model": {"type": "BPE", "vocab": {}, "merges": {}}, "decoder": {"type": "Metaspace"}}`,
	`{"model": {"type": "BPE"}, "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "?"}}]}}`,
	`{"model": {"type": "BPE"}, "normalizer": {"type": "Lowercase"}}`,
	`{"added_tokens": [{"id": 0, "content": ""}], "model": {"type": "BPE", "vocab": {"x": 0}}}`,
	`{"added_tokens": [{"id": 2000000000, "content": ""}, {"id": -5, "content": "y"}], "model": {"type": "BPE", "vocab": {"x": 0}}}`,
	`{"model": {"type": "Unigram", "unk_id": 0, "byte_fallback": true, "vocab": [["<unk>", 0], ["▁a", -1.5], ["b", -2], ["▁", -3], ["<0x63>", -9]]},
	  "normalizer": {"type": "Sequence", "normalizers": [{"type": "Precompiled", "precompiled_charsmap": "` + byteCharsmap(map[byte]string{'A': "a", 'B': ""}) + `"},
	    {"type": "Strip", "strip_left": false, "strip_right": true}, {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "▁"}]},
	  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}]},
	  "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}}`,
	`{"model": {"type": "Unigram", "unk_id": 1, "vocab": [["a", -1], ["<unk>", 0], ["a", -2]]}, "normalizer": {"type": "Precompiled", "precompiled_charsmap": "CAAAAP////8AAAAAYQA="}}`,
	`{`, `null`, `[]`, `{"model": 3}`, ``,
}

// FuzzFromJSON wants FromJSON to return an error, never panic, on any
// document, and the tokenizers it accepts to encode and decode any text.
func FuzzFromJSON(f *testing.F) {
	for _, seed := range fuzzSeeds {
		f.Add([]byte(seed), "ab <s>a\u0301 12345  b\n<x>")
	}
	f.Fuzz(func(t *testing.T, data []byte, text string) {
		tok, err := FromJSON(data)
		if err != nil {
			if tok != nil {
				t.Fatal("FromJSON returned a tokenizer and an error")
			}
			return
		}
		if (tok.usesRegexEngine() || bytes.Contains(data, []byte("Regex"))) && len(text) > 16 {
			// A fuzzed pattern can backtrack exponentially; keep the
			// text short enough to finish.
			text = text[:16]
		}
		for _, addSpecial := range []bool{false, true} {
			ids := tok.Encode(text, addSpecial)
			for _, id := range ids {
				if id < 0 || id >= tok.VocabSize() {
					t.Fatalf("Encode(%q) returned id %d, vocabulary size %d", text, id, tok.VocabSize())
				}
			}
			ids = append(ids, -1, tok.VocabSize(), int(^uint(0)>>1))
			whole := tok.Decode(ids, addSpecial)
			if !utf8.ValidString(whole) {
				t.Fatalf("Decode(%v) = %q, not UTF-8", ids, whole)
			}
			d := tok.NewStreamDecoder(addSpecial)
			var b strings.Builder
			for _, id := range ids {
				b.WriteString(d.Add(id))
			}
			b.WriteString(d.Flush())
			if b.String() != whole {
				t.Fatalf("stream %q != Decode %q", b.String(), whole)
			}
		}
		for _, id := range []int{-1, 0, tok.VocabSize() - 1, tok.VocabSize()} {
			tok.Token(id)
			tok.IsSpecial(id)
		}
		tok.TokenID(text)
	})
}

// usesRegexEngine reports whether a pre-tokenizer step runs on regexp2.
func (t *Tokenizer) usesRegexEngine() bool {
	for _, step := range t.pre.steps {
		if s, ok := step.(*splitStep); ok && s.regex != nil {
			return true
		}
	}
	return false
}
