package tokenizer_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"fusion/engine/tokenizer"
	"fusion/engine/tokenizer/corpus"
)

// checkStream feeds ids one at a time and wants every chunk to be valid
// UTF-8 and the chunks to add up to Decode.
func checkStream(t *testing.T, tok *tokenizer.Tokenizer, ids []int, skipSpecial bool) {
	t.Helper()
	d := tok.NewStreamDecoder(skipSpecial)
	var b strings.Builder
	for _, id := range ids {
		chunk := d.Add(id)
		if !utf8.ValidString(chunk) {
			t.Fatalf("Add(%d) returned invalid UTF-8 %q (ids %v)", id, chunk, ids)
		}
		b.WriteString(chunk)
	}
	tail := d.Flush()
	if !utf8.ValidString(tail) {
		t.Fatalf("Flush returned invalid UTF-8 %q", tail)
	}
	b.WriteString(tail)
	if want := tok.Decode(ids, skipSpecial); b.String() != want {
		t.Fatalf("stream of %v = %q, Decode = %q", ids, b.String(), want)
	}
}

func TestStreamDecoderTiny(t *testing.T) {
	tok := addedDoc().build(t)
	// "€" is E2 82 AC: one byte token each, so the character spans three
	// ids; 259 is the special token "<S>".
	tests := []struct {
		ids    []int
		chunks []string
	}{
		{[]int{0xE2, 0x82, 0xAC, 'a'}, []string{"", "", "€", "a"}},
		{[]int{'a', 0xE2, 259, 0x82}, []string{"a", "", "\uFFFD<S>", "\uFFFD"}},
		{[]int{0xF0, 0x9F, 0x98}, []string{"", "", ""}},
		{[]int{0xFF, 'b'}, []string{"\uFFFD", "b"}},
	}
	for _, tt := range tests {
		d := tok.NewStreamDecoder(false)
		for i, id := range tt.ids {
			if got := d.Add(id); got != tt.chunks[i] {
				t.Errorf("ids %v: Add(%d) = %q, want %q", tt.ids, id, got, tt.chunks[i])
			}
		}
		checkStream(t, tok, tt.ids, false)
		checkStream(t, tok, tt.ids, true)
	}
	d := tok.NewStreamDecoder(false)
	d.Add(0xF0)
	if got := d.Flush(); got != "\uFFFD" {
		t.Errorf("Flush after a lone lead byte = %q, want U+FFFD", got)
	}
}

// TestStreamDecoderReal streams the ids of the corpus and random ids
// (which split characters anywhere) through the real Qwen3 and gpt-oss
// (o200k_harmony) tokenizers.
func TestStreamDecoderReal(t *testing.T) {
	for _, name := range []string{"qwen3", "gptoss"} {
		t.Run(name, func(t *testing.T) {
			tok := loadFixture(t, name)
			for _, text := range corpus.Generate(3, 500) {
				checkStream(t, tok, tok.Encode(text, false), false)
			}
			rng := rand.New(rand.NewPCG(5, 6))
			for range 2000 {
				ids := make([]int, rng.IntN(12))
				for i := range ids {
					if rng.IntN(2) == 0 {
						ids[i] = rng.IntN(256) // single-byte tokens, often partial characters
					} else {
						ids[i] = rng.IntN(tok.VocabSize() + 10)
					}
				}
				checkStream(t, tok, ids, rng.IntN(2) == 0)
			}
		})
	}
}
