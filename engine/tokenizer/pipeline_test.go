package tokenizer_test

import (
	"slices"
	"testing"

	"fusion/engine/tokenizer"
)

// The expected ids are those of HF tokenizers on the same documents.
func TestPipelineOptions(t *testing.T) {
	prefixSpace := tinyDoc{PreTokenizer: map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\d`}, "behavior": "Isolated", "invert": false},
		map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": false},
	}}}
	nfcAdded := tinyDoc{
		Normalizer: map[string]any{"type": "NFC"},
		Added: []map[string]any{
			added(256, "café", false, false, false, false, true),  // matched after NFC
			added(257, "niño", false, false, false, false, false), // matched on raw text
		},
	}
	tests := []struct {
		name string
		doc  tinyDoc
		text string
		want []int
	}{
		{"prefix space on every piece", prefixSpace, "ab1 cd", []int{32, 97, 98, 32, 49, 32, 99, 100}},
		{"prefix space kept", prefixSpace, " x", []int{32, 120}},
		{"normalized token after NFC", nfcAdded, "cafe\u0301!", []int{256, 33}},
		{"normalized token precomposed", nfcAdded, "café", []int{256}},
		{"raw token needs raw text", nfcAdded, "nin\u0303o niño", []int{110, 105, 195, 177, 111, 32, 257}},
	}
	for _, tt := range tests {
		if got := tt.doc.build(t).Encode(tt.text, false); !slices.Equal(got, tt.want) {
			t.Errorf("%s: Encode(%q) = %v, want %v", tt.name, tt.text, got, tt.want)
		}
	}
}

// templateDoc's post-processor is a ByteLevel and a template with special
// tokens on both sides, in a Sequence; 256-258 are added special tokens.
func templateDoc() tinyDoc {
	special := func(content string, id int) map[string]any {
		return map[string]any{"id": content, "ids": []int{id}, "tokens": []string{content}}
	}
	tok := func(id string) map[string]any {
		return map[string]any{"SpecialToken": map[string]any{"id": id, "type_id": 0}}
	}
	seq := map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}
	return tinyDoc{
		Added: []map[string]any{
			added(256, "<bos>", true, false, false, false, false),
			added(257, "<eos>", true, false, false, false, false),
			added(258, "<outer>", true, false, false, false, false),
		},
		Post: map[string]any{"type": "Sequence", "processors": []any{
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
			map[string]any{
				"type":   "TemplateProcessing",
				"single": []any{tok("<outer>"), tok("<bos>"), seq, tok("<eos>")},
				"pair":   []any{},
				"special_tokens": map[string]any{
					"<bos>": special("<bos>", 256), "<eos>": special("<eos>", 257), "<outer>": special("<outer>", 258),
				},
			},
		}},
	}
}

// The expected ids are those of HF tokenizers on the same document.
func TestPostProcessorTemplates(t *testing.T) {
	tok := templateDoc().build(t)
	if got, want := tok.Encode("hi", true), []int{258, 256, 104, 105, 257}; !slices.Equal(got, want) {
		t.Errorf("Encode(hi, addSpecial) = %v, want %v", got, want)
	}
	if got, want := tok.Encode("hi", false), []int{104, 105}; !slices.Equal(got, want) {
		t.Errorf("Encode(hi) = %v, want %v", got, want)
	}
	if got, want := tok.Encode("", true), []int{258, 256, 257}; !slices.Equal(got, want) {
		t.Errorf("Encode(\"\", addSpecial) = %v, want %v", got, want)
	}
	// Without options, BOS is the first token the post-processor adds.
	if bos, ok := tok.BOS(); !ok || bos != 258 || !tok.AddBOS() {
		t.Errorf("BOS() = %d, %v; AddBOS() = %v; want 258, true, true", bos, ok, tok.AddBOS())
	}
	if len(tok.EOS()) != 0 || tok.ChatTemplate() != "" {
		t.Errorf("EOS() = %v, ChatTemplate() = %q; want none", tok.EOS(), tok.ChatTemplate())
	}
}

func TestFromJSONOptions(t *testing.T) {
	tok, err := tokenizer.FromJSON(templateDoc().json(t),
		tokenizer.WithBOS(256), tokenizer.WithEOS(257, 258, 257), tokenizer.WithAddBOS(false),
		tokenizer.WithChatTemplate("", "T"), tokenizer.WithChatTemplate("tool_use", "U"))
	if err != nil {
		t.Fatal(err)
	}
	if bos, ok := tok.BOS(); !ok || bos != 256 {
		t.Errorf("BOS() = %d, %v; want 256", bos, ok)
	}
	if got := tok.EOS(); !slices.Equal(got, []int{257, 258}) {
		t.Errorf("EOS() = %v, want [257 258]", got)
	}
	if tok.AddBOS() {
		t.Error("AddBOS() = true, want false")
	}
	if got := tok.ChatTemplates(); len(got) != 2 || got["default"] != "T" || got["tool_use"] != "U" || tok.ChatTemplate() != "T" {
		t.Errorf("ChatTemplates() = %v", got)
	}
	// Encode with addSpecial still follows tokenizer.json.
	if got := tok.Encode("x", true); !slices.Equal(got, []int{258, 256, 120, 257}) {
		t.Errorf("Encode(x, addSpecial) = %v", got)
	}
}
