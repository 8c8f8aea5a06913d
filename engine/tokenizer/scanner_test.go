package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// The expected pieces are those of HF tokenizers' Split pre-tokenizer with
// the same pattern.
func TestScanners(t *testing.T) {
	llama, qwen, gpt2 := handScanner(patternLlama3), handScanner(patternQwen2), handScanner(patternGPT2)
	tests := []struct {
		text              string
		llama, qwen, gpt2 []string
	}{
		{"Hello world", []string{"Hello", " world"}, nil, []string{"Hello", " world"}},
		{"I'LL don'T", []string{"I", "'LL", " don", "'T"}, nil, []string{"I", "'", "LL", " don", "'", "T"}},
		{"  a", []string{" ", " a"}, nil, []string{" ", " a"}},
		{"a  \n\n  b", []string{"a", "  \n\n", " ", " b"}, nil, []string{"a", "  \n\n ", " b"}},
		{"x \r\n", []string{"x", " \r\n"}, nil, []string{"x", " \r\n"}},
		{"12345", []string{"123", "45"}, []string{"1", "2", "3", "4", "5"}, []string{"12345"}},
		{" 42", []string{" ", "42"}, []string{" ", "4", "2"}, []string{" 42"}},
		{"foo!!\n\nbar", []string{"foo", "!!\n\n", "bar"}, nil, []string{"foo", "!!", "\n", "\n", "bar"}},
		{"it'ſ", []string{"it", "'ſ"}, nil, []string{"it", "'", "ſ"}},
		{"\t\tx", []string{"\t", "\tx"}, nil, []string{"\t", "\t", "x"}},
		{"e\u0301", []string{"e", "\u0301"}, nil, []string{"e", "\u0301"}},
		{"x   ", []string{"x", "   "}, nil, []string{"x", "   "}},
		{"a\u00a0b", []string{"a", "\u00a0b"}, nil, []string{"a", "\u00a0", "b"}},
		{"$100.00", []string{"$", "100", ".", "00"}, []string{"$", "1", "0", "0", ".", "0", "0"}, []string{"$", "100", ".", "00"}},
		{"中文。", []string{"中文", "。"}, nil, []string{"中文", "。"}},
		{"don't'Re", []string{"don", "'t", "'Re"}, nil, []string{"don", "'t", "'", "Re"}},
		{" \n x", []string{" \n", " x"}, nil, []string{" \n", " x"}},
		{"?!\r\n\r\n", []string{"?!\r\n\r\n"}, nil, []string{"?!", "\r\n\r\n"}},
		{"٣٤٥٦", []string{"٣٤٥", "٦"}, []string{"٣", "٤", "٥", "٦"}, []string{"٣٤٥٦"}},
		{"", nil, nil, nil},
	}
	for _, tt := range tests {
		if tt.qwen == nil {
			tt.qwen = tt.llama // the patterns differ only on digits
		}
		for _, c := range []struct {
			name string
			sc   splitter
			want []string
		}{{"llama3", llama, tt.llama}, {"qwen2", qwen, tt.qwen}, {"gpt2", gpt2, tt.gpt2}} {
			if got := c.sc.split(tt.text, nil); !slices.Equal(got, c.want) {
				t.Errorf("%s: split(%q) = %q, want %q", c.name, tt.text, got, c.want)
			}
		}
	}
}

// trickyRunes are the characters the scanners' decisions turn on, with
// letters and numbers that are new in Unicode 16 (where Go's own tables
// are older) and invalid UTF-8.
var trickyRunes = []string{
	" ", " ", " ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "\u0085", "\v",
	"'", "'", "s", "S", "ſ", "t", "T", "r", "R", "e", "E", "v", "l", "L", "m", "d", "D",
	"a", "Z", "é", "中", "ß", "ǅ", "1", "9", "٣", "²", "Ⅻ", "½", "!", ".", "$", "(", "_", "-",
	"\u0301", "\u0e31", "😀", "\U0001F3FD", "\u200d", "\U00020000", "\U0001E5D0", "\u1c89",
	"\U00016D63", "\U0001E5F1", "\x00", "\xff", "\xe2\x82",
}

func randomTrickyString(rng *rand.Rand) string {
	var b strings.Builder
	for range rng.IntN(40) {
		if rng.IntN(10) == 0 {
			b.WriteRune(rune(rng.IntN(0x110000)))
			continue
		}
		b.WriteString(trickyRunes[rng.IntN(len(trickyRunes))])
	}
	return b.String()
}

// regexPieces cuts s the way a Split pre-tokenizer with the Isolated
// behaviour does, with the regex engine.
func regexPieces(t *testing.T, re *regexSplitter, s string) []string {
	t.Helper()
	var out []string
	prev := 0
	for _, m := range re.matches(s) {
		if m[0] > prev {
			out = append(out, s[prev:m[0]])
		}
		if m[1] > m[0] {
			out = append(out, s[m[0]:m[1]])
		}
		prev = m[1]
	}
	if prev < len(s) {
		out = append(out, s[prev:])
	}
	return out
}

// TestScannersAgreeWithRegex runs each hand-written scanner and the regex
// engine on the same pattern over random strings.
func TestScannersAgreeWithRegex(t *testing.T) {
	for _, pattern := range []string{patternLlama3, patternQwen2, patternGPT2} {
		re, err := compileSplitPattern(pattern)
		if err != nil {
			t.Fatal(err)
		}
		sc := handScanner(pattern)
		rng := rand.New(rand.NewPCG(1, 2))
		failures := 0
		for range 3000 {
			s := randomTrickyString(rng)
			got, want := sc.split(s, nil), regexPieces(t, re, s)
			if !slices.Equal(got, want) {
				failures++
				if failures <= 5 {
					t.Errorf("pattern %.30q…: split(%q)\n  scanner %q\n  regex   %q", pattern, s, got, want)
				}
			}
		}
	}
}
