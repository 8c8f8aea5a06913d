package gguf

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"fusion/internal/testenv"
)

// tinyTokenizerMeta is a five-merge byte-level BPE vocabulary with one
// control and one user-defined token and one padding slot.
func tinyTokenizerMeta(pre string, addBOS bool) []KV {
	return []KV{
		{KeyArchitecture, String("llama")},
		{KeyTokenizerModel, String("gpt2")},
		{KeyTokenizerPre, String(pre)},
		{KeyTokens, Array([]string{"!", "a", "b", "ab", "Ġ", "Ġab", "<|bos|>", "<think>", "[PAD8]", "<|eot|>"})},
		{KeyTokenType, Array([]int32{1, 1, 1, 1, 1, 1, 3, 4, 5, 3})},
		{KeyMerges, Array([]string{"a b", "Ġ ab"})},
		{KeyBOS, Uint32(6)},
		{KeyEOS, Uint32(9)},
		{KeyEOT, Uint32(9)},
		{KeyEOM, Uint32(0)},
		{KeyAddBOS, Bool(addBOS)},
		{KeyChatTemplate, String("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}")},
	}
}

func parseMeta(t *testing.T, meta []KV) *File {
	t.Helper()
	f, err := Parse("tok.gguf", writeSample(t, meta, nil))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// tokJSON is the part of tokenizer.json the tests look at.
type tokJSON struct {
	AddedTokens []struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer   *struct{ Type string } `json:"normalizer"`
	PreTokenizer struct {
		Type          string
		Pretokenizers []struct {
			Type    string
			Pattern struct{ Regex string }
		}
	} `json:"pre_tokenizer"`
	PostProcessor struct {
		Type       string
		Processors []struct {
			Type   string
			Single []map[string]struct {
				ID string `json:"id"`
			}
			SpecialTokens map[string]struct{ IDs []int } `json:"special_tokens"`
		}
	} `json:"post_processor"`
	Decoder struct{ Type string }
	Model   struct {
		Type         string
		IgnoreMerges bool `json:"ignore_merges"`
		Vocab        map[string]int
		Merges       []json.RawMessage // "a b" strings or ["a", "b"] pairs
	}
}

func TestTokenizerJSON(t *testing.T) {
	tests := []struct {
		pre          string
		addBOS       bool
		patterns     []string
		nfc          bool
		ignoreMerges bool
	}{
		{"llama-bpe", true, []string{llama3Pattern}, false, true},
		{"qwen2", false, []string{qwen2Pattern}, true, false},
		{"deepseek-v3", true, []string{`\p{N}{1,3}`, deepseekCJK, deepseekWords}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.pre, func(t *testing.T) {
			f := parseMeta(t, tinyTokenizerMeta(tc.pre, tc.addBOS))
			raw, err := f.TokenizerJSON()
			if err != nil {
				t.Fatal(err)
			}
			var doc tokJSON
			if err := json.Unmarshal(raw, &doc); err != nil {
				t.Fatalf("invalid JSON: %v", err)
			}
			if doc.Model.Type != "BPE" || len(doc.Model.Vocab) != 10 || len(doc.Model.Merges) != 2 || doc.Model.IgnoreMerges != tc.ignoreMerges {
				t.Errorf("model %s: %d vocab, %d merges, ignore_merges %v", doc.Model.Type, len(doc.Model.Vocab), len(doc.Model.Merges), doc.Model.IgnoreMerges)
			}
			if doc.Model.Vocab["Ġab"] != 5 || doc.Model.Vocab["[PAD8]"] != 8 {
				t.Errorf("vocab ids: Ġab=%d [PAD8]=%d", doc.Model.Vocab["Ġab"], doc.Model.Vocab["[PAD8]"])
			}
			if id, ok := doc.Model.Vocab["<|bos|>"]; !ok || id != 6 {
				t.Errorf("control token <|bos|> has vocab id %d, %v; want 6", id, ok)
			}
			if bytes.Index(raw, []byte(`"ab":3`)) > bytes.Index(raw, []byte(`"Ġab":5`)) {
				t.Error("vocab not in id order")
			}
			type added struct {
				id      int
				content string
				special bool
			}
			var got []added
			for _, a := range doc.AddedTokens {
				got = append(got, added{a.ID, a.Content, a.Special})
			}
			want := []added{{6, "<|bos|>", true}, {7, "<think>", false}, {9, "<|eot|>", true}}
			if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
				t.Errorf("added tokens %v, want %v", got, want)
			}
			if (doc.Normalizer != nil) != tc.nfc || (tc.nfc && doc.Normalizer.Type != "NFC") {
				t.Errorf("normalizer %v, want NFC: %v", doc.Normalizer, tc.nfc)
			}
			pts := doc.PreTokenizer.Pretokenizers
			if doc.PreTokenizer.Type != "Sequence" || len(pts) != len(tc.patterns)+1 || pts[len(pts)-1].Type != "ByteLevel" {
				t.Fatalf("pre_tokenizer %+v", doc.PreTokenizer)
			}
			for i, p := range tc.patterns {
				if pts[i].Type != "Split" || pts[i].Pattern.Regex != p {
					t.Errorf("split %d: %s %q, want %q", i, pts[i].Type, pts[i].Pattern.Regex, p)
				}
			}
			pp := doc.PostProcessor
			if tc.addBOS {
				if pp.Type != "Sequence" || len(pp.Processors) != 2 || pp.Processors[1].Type != "TemplateProcessing" ||
					pp.Processors[1].Single[0]["SpecialToken"].ID != "<|bos|>" || pp.Processors[1].SpecialTokens["<|bos|>"].IDs[0] != 6 {
					t.Errorf("post_processor %+v, want BOS template", pp)
				}
			} else if pp.Type != "ByteLevel" {
				t.Errorf("post_processor %+v, want ByteLevel", pp)
			}
			if doc.Decoder.Type != "ByteLevel" {
				t.Errorf("decoder %v", doc.Decoder)
			}
		})
	}
}

func TestTokenizerAccessors(t *testing.T) {
	f := parseMeta(t, tinyTokenizerMeta("qwen2", false))
	if id, ok := f.BOS(); !ok || id != 6 {
		t.Errorf("BOS = %d, %v", id, ok)
	}
	if id, ok := f.EOS(); !ok || id != 9 {
		t.Errorf("EOS = %d, %v", id, ok)
	}
	if got := f.StopTokens(); len(got) != 2 || got[0] != 9 || got[1] != 0 {
		t.Errorf("StopTokens = %v, want [9 0]", got)
	}
	if got := f.ChatTemplate(); got != "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}" {
		t.Errorf("ChatTemplate = %q", got)
	}
}

func TestTokenizerJSONErrors(t *testing.T) {
	replace := func(key string, v Value) []KV {
		meta := tinyTokenizerMeta("qwen2", true)
		for i := range meta {
			if meta[i].Key == key {
				meta[i].Value = v
			}
		}
		return meta
	}
	tests := []struct {
		name  string
		meta  []KV
		unsup bool
	}{
		{"unknown pre", replace(KeyTokenizerPre, String("falcon")), true},
		{"sentencepiece", replace(KeyTokenizerModel, String("llama")), true},
		{"types length", replace(KeyTokenType, Array([]int32{1})), false},
		{"tokens not strings", replace(KeyTokens, Array([]int32{1})), false},
		{"bos out of range", replace(KeyBOS, Uint32(99)), false},
	}
	for _, tc := range tests {
		_, err := parseMeta(t, tc.meta).TokenizerJSON()
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if tc.unsup != errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: %v (ErrUnsupported: %v)", tc.name, err, errors.Is(err, ErrUnsupported))
		}
	}
}

// TestTokenizerRoundTripRealTokenizers stores real Hugging Face
// tokenizers as GGUF metadata (TokenizerKVs, as llama.cpp's converter
// would), synthesises tokenizer.json back (TokenizerJSON), and has the
// Hugging Face tokenizers package encode a corpus with both: the ids must
// be identical.
func TestTokenizerRoundTripRealTokenizers(t *testing.T) {
	tests := []struct {
		fixture   string
		pre       string
		bos, eos  int
		addBOS    bool
		vocabSize int
		specials  bool  // compare with add_special_tokens=True too
		stops     []int // StopTokens, when not nil
	}{
		{"qwen3", "qwen2", -1, 151645, false, 151936, true, nil},
		{"llama3_1", "llama-bpe", 128000, 128009, true, 0, true, nil},
		// DeepSeek's tokenizer.json has no BOS template (transformers adds
		// it), so only the plain encoding is comparable.
		{"deepseek_v3", "deepseek-v3", 0, 1, true, 0, false, nil},
		// gpt-oss (o200k_harmony, llama.cpp's "gpt-4o"): no BOS added,
		// <|return|> ends; padded to gpt-oss-20b's 201,088 rows.
		// Its stops are llama.cpp's (and generation_config.json's):
		// <|return|>, <|call|>, <|endoftext|>.
		{"gptoss", "gpt-4o", 199998, 200002, false, 201088, true, []int{200002, 200012, 199999}},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			dir := testenv.TokenizerDir(t, tc.fixture)
			orig, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
			if err != nil {
				t.Fatal(err)
			}
			var cfg struct {
				ChatTemplate string `json:"chat_template"`
			}
			if b, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json")); err == nil {
				_ = json.Unmarshal(b, &cfg)
			}
			kvs, err := TokenizerKVs(HFTokenizer{JSON: orig, Pre: tc.pre, BOS: tc.bos, EOS: tc.eos, AddBOS: tc.addBOS,
				ChatTemplate: cfg.ChatTemplate, VocabSize: tc.vocabSize})
			if err != nil {
				t.Fatal(err)
			}
			f := parseMeta(t, append([]KV{{KeyArchitecture, String("llama")}}, kvs...))
			if f.ChatTemplate() != cfg.ChatTemplate {
				t.Error("chat template changed")
			}
			if got := f.StopTokens(); tc.stops != nil && !slices.Equal(got, tc.stops) {
				t.Errorf("stop tokens %v, want %v", got, tc.stops)
			}
			synth, err := f.TokenizerJSON()
			if err != nil {
				t.Fatal(err)
			}
			var a, b tokJSON
			if err := json.Unmarshal(orig, &a); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(synth, &b); err != nil {
				t.Fatal(err)
			}
			if len(a.AddedTokens) != len(b.AddedTokens) || len(a.Model.Merges) != len(b.Model.Merges) {
				t.Errorf("added tokens %d → %d, merges %d → %d", len(a.AddedTokens), len(b.AddedTokens), len(a.Model.Merges), len(b.Model.Merges))
			}
			for tok, id := range a.Model.Vocab {
				if got, ok := b.Model.Vocab[tok]; ok && got != id {
					t.Fatalf("vocab %q: id %d, original %d", tok, got, id)
				}
			}
			path := filepath.Join(t.TempDir(), "tokenizer.json")
			if err := os.WriteFile(path, synth, 0o644); err != nil {
				t.Fatal(err)
			}
			flag := "0"
			if tc.specials {
				flag = "1"
			}
			var res struct {
				Checked    int               `json:"checked"`
				Mismatches []json.RawMessage `json:"mismatches"`
			}
			out := runPython(t, "tokenizer_parity.py", filepath.Join(dir, "tokenizer.json"), path, flag)
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if res.Checked == 0 || len(res.Mismatches) > 0 {
				t.Errorf("%d of %d encodings differ: %s", len(res.Mismatches), res.Checked, res.Mismatches)
			}
			t.Logf("%d encodings identical; vocab %d, added %d, merges %d", res.Checked, len(b.Model.Vocab), len(b.AddedTokens), len(b.Model.Merges))
		})
	}
}
