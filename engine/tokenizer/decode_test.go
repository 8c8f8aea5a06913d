package tokenizer

import (
	"testing"

	"fusion/internal/testenv"
)

// The expected strings are Python's bytes.decode("utf-8", "replace"), which
// follows the same rule as Rust's from_utf8_lossy used by HF tokenizers.
func TestAppendValidUTF8(t *testing.T) {
	tests := []struct{ in, want string }{
		{"\xe2\x82", "\uFFFD"},
		{"\xe2\x82A", "\uFFFDA"},
		{"\xff\xfe", "\uFFFD\uFFFD"},
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"},
		{"\xf0\x9f\x98", "\uFFFD"},
		{"\xf0\x9f\x98\x80", "😀"},
		{"\xc0\xaf", "\uFFFD\uFFFD"},
		{"\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"},
		{"a\x80b", "a\uFFFDb"},
		{"\xe0\x80\x80", "\uFFFD\uFFFD\uFFFD"},
		{"\xf0\x90\x80", "\uFFFD"},
		{"plain ascii, é, 中", "plain ascii, é, 中"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := string(appendValidUTF8(nil, []byte(tt.in))); got != tt.want {
			t.Errorf("appendValidUTF8(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestIncompleteTail(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", 0},
		{"abc", 0},
		{"a\xe2", 1},
		{"a\xe2\x82", 2},
		{"a\xe2\x82\xac", 0}, // complete €
		{"\xf0\x9f\x98", 3},
		{"\xf0\x9f", 2},
		{"\xf0", 1},
		{"\xed\xa0", 0}, // can never become valid
		{"\xe0\x80", 0},
		{"\x80", 0},
		{"\xff", 0},
		{"é\xc3", 1},
	}
	for _, tt := range tests {
		if got := incompleteTail([]byte(tt.in)); got != tt.want {
			t.Errorf("incompleteTail(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestTokenBytes(t *testing.T) {
	tok, err := Load(testenv.TokenizerDir(t, "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	// "é" is two bytes; byte-level BPE has a token for each byte alone.
	ids := tok.Encode("héllo wörld", false)
	var all []byte
	for _, id := range ids {
		b, ok := tok.TokenBytes(id)
		if !ok {
			t.Fatalf("no bytes for id %d", id)
		}
		all = append(all, b...)
	}
	if string(all) != "héllo wörld" {
		t.Errorf("token bytes join to %q", all)
	}
	if _, ok := tok.TokenBytes(-1); ok {
		t.Error("TokenBytes(-1) reported ok")
	}
}
