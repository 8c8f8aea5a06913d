package tokenizer_test

import (
	"slices"
	"testing"
)

// addedDoc has added tokens with each matching option; the byte tokens are
// ids 0-255, so plain text encodes to its bytes.
func addedDoc() tinyDoc {
	return tinyDoc{Added: []map[string]any{
		added(256, "<L>", false, true, false, false, false),
		added(257, "<R>", false, false, true, false, false),
		added(258, "<W>", false, false, false, true, false),
		added(259, "<S>", true, false, false, false, false),
		added(260, "<S>x", true, false, false, false, false),
		added(261, "<LR>", false, true, true, false, false),
	}}
}

// The expected ids are those of HF tokenizers 0.23.3 on the same document.
func TestAddedTokens(t *testing.T) {
	tok := addedDoc().build(t)
	tests := []struct {
		text string
		want []int
	}{
		{"a  <L>b", []int{97, 256, 98}},
		{"a<R>  b", []int{97, 257, 98}},
		{"a <LR> b", []int{97, 261, 98}},
		{"\t<L>\t<R>\t", []int{256, 9, 257}},
		{"<R>\u2000b", []int{257, 98}},
		{"a <W> b", []int{97, 32, 258, 32, 98}},
		{"a<W>b", []int{97, 60, 87, 62, 98}},
		{"<W>", []int{258}},
		{"é<W>", []int{195, 169, 60, 87, 62}},
		{"_<W>", []int{95, 60, 87, 62}},
		{"-<W>.", []int{45, 258, 46}},
		{"<S>x y", []int{260, 32, 121}},
		{"<S><S>", []int{259, 259}},
		{"<S", []int{60, 83}},
		{"<R><L>", []int{257, 256}},
		{"x <R> <L> y", []int{120, 32, 257, 256, 32, 121}},
	}
	for _, tt := range tests {
		if got := tok.Encode(tt.text, false); !slices.Equal(got, tt.want) {
			t.Errorf("Encode(%q) = %v, want %v", tt.text, got, tt.want)
		}
	}
}

func TestDecodeSkipsOnlySpecialTokens(t *testing.T) {
	tok := addedDoc().build(t)
	ids := []int{259, 104, 105, 257, 260}
	if got, want := tok.Decode(ids, false), "<S>hi<R><S>x"; got != want {
		t.Errorf("Decode(skipSpecial=false) = %q, want %q", got, want)
	}
	if got, want := tok.Decode(ids, true), "hi<R>"; got != want {
		t.Errorf("Decode(skipSpecial=true) = %q, want %q", got, want)
	}
	if !tok.IsSpecial(259) || tok.IsSpecial(257) || tok.IsSpecial(104) || tok.IsSpecial(-1) || tok.IsSpecial(1<<20) {
		t.Error("IsSpecial: want true for 259 only")
	}
}

// HF tokenizers ignores the "id" of added tokens when it loads a
// tokenizer.json: a token already in the vocabulary keeps its id, a new one
// gets the next free id. Following it keeps the ids identical.
func TestAddedTokenIDsFollowHF(t *testing.T) {
	tok := tinyDoc{Added: []map[string]any{
		added(1000, "<x>", true, false, false, false, false),
		added(5, "a", false, false, false, false, false),
		added(1001, "<y>", true, false, false, false, false),
	}}.build(t)
	for _, tt := range []struct {
		token string
		want  int
	}{{"<x>", 256}, {"a", 97}, {"<y>", 257}} {
		if got, ok := tok.TokenID(tt.token); !ok || got != tt.want {
			t.Errorf("TokenID(%q) = %d, %v; want %d", tt.token, got, ok, tt.want)
		}
	}
	if got := tok.VocabSize(); got != 258 {
		t.Errorf("VocabSize() = %d, want 258", got)
	}
}
