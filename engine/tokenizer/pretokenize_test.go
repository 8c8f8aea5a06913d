package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/dlclark/regexp2/v2"
)

func splitStepFor(t *testing.T, pattern map[string]string, behavior string, invert bool) *splitStep {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"type": "Split", "pattern": pattern, "behavior": behavior, "invert": invert})
	if err != nil {
		t.Fatal(err)
	}
	p, err := buildPreTokenizer(raw)
	if err != nil {
		t.Fatal(err)
	}
	return p.steps[0].(*splitStep)
}

// The expected pieces are those of HF tokenizers' Split with the regex
// "-+|x" on two inputs.
func TestSplitBehaviors(t *testing.T) {
	tests := []struct {
		behavior string
		invert   bool
		a, b     []string // pieces of "a--bx-c--" and "--ab-xx"
	}{
		{"Isolated", false, []string{"a", "--", "b", "x", "-", "c", "--"}, []string{"--", "ab", "-", "x", "x"}},
		{"Isolated", true, []string{"a", "--", "b", "x", "-", "c", "--"}, []string{"--", "ab", "-", "x", "x"}},
		{"Removed", false, []string{"a", "b", "c"}, []string{"ab"}},
		{"Removed", true, []string{"--", "x", "-", "--"}, []string{"--", "-", "x", "x"}},
		{"MergedWithPrevious", false, []string{"a--", "bx", "-", "c--"}, []string{"--", "ab-", "x", "x"}},
		{"MergedWithPrevious", true, []string{"a", "--b", "x", "-c", "--"}, []string{"--ab", "-", "x", "x"}},
		{"MergedWithNext", false, []string{"a", "--b", "x", "-c", "--"}, []string{"--ab", "-", "x", "x"}},
		{"MergedWithNext", true, []string{"a--", "bx", "-", "c--"}, []string{"--", "ab-", "x", "x"}},
		{"Contiguous", false, []string{"a", "--", "b", "x-", "c", "--"}, []string{"--", "ab", "-xx"}},
		{"Contiguous", true, []string{"a", "--", "b", "x-", "c", "--"}, []string{"--", "ab", "-xx"}},
	}
	for _, tt := range tests {
		step := splitStepFor(t, map[string]string{"Regex": "-+|x"}, tt.behavior, tt.invert)
		for _, c := range []struct {
			text string
			want []string
		}{{"a--bx-c--", tt.a}, {"--ab-xx", tt.b}} {
			if got := step.apply(c.text, nil); !slices.Equal(got, c.want) {
				t.Errorf("%s invert=%v: %q -> %q, want %q", tt.behavior, tt.invert, c.text, got, c.want)
			}
		}
	}
	literal := splitStepFor(t, map[string]string{"String": "--"}, "Isolated", false)
	if got, want := literal.apply("a--b----c", nil), []string{"a", "--", "b", "--", "--", "c"}; !slices.Equal(got, want) {
		t.Errorf("String pattern: %q, want %q", got, want)
	}
}

func TestPreTokenizerErrors(t *testing.T) {
	tests := []struct{ doc, want string }{
		{`{"type": "Whitespace"}`, `unsupported pre-tokenizer type "Whitespace"`},
		{`{"type": "Split", "pattern": {"Regex": "("}, "behavior": "Isolated"}`, "split: compile pattern"},
		{`{"type": "Split", "pattern": {}, "behavior": "Isolated"}`, "neither Regex nor String"},
		{`{"type": "Split", "pattern": {"String": "x"}, "behavior": "Sideways"}`, `unsupported behavior "Sideways"`},
		{`{"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}, {"type": "Split", "pattern": {"String": "x"}, "behavior": "Isolated"}]}`, "pretokenizers[1]: a ByteLevel pre-tokenizer must come last"},
	}
	for _, tt := range tests {
		_, err := buildPreTokenizer(json.RawMessage(tt.doc))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one containing %q", tt.doc, err, tt.want)
		}
	}
}

// TestExpandedClassesMatchTables checks that the regex engine, given the
// expanded \p{..} classes, classifies runes like the Unicode 16 tables,
// inside and outside brackets and negated.
func TestExpandedClassesMatchTables(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	runes := []rune{0x1C89, 0x1E5D0, 0x2EBF0, 0x10D4A, 0x0897, 'a', '1', '-', 0x10FFFF, 0xE000}
	for range 3000 {
		runes = append(runes, rune(rng.IntN(0x110000)))
	}
	for name, table := range unicodeCategoryTables {
		for _, form := range []struct {
			pattern string
			want    func(rune) bool
		}{
			{`^\p{` + name + `}$`, func(r rune) bool { return unicode.Is(table, r) }},
			{`^[x\p` + name + `]$`, func(r rune) bool { return r == 'x' || unicode.Is(table, r) }},
			{`^[^\r\p{` + name + `}]$`, func(r rune) bool { return r != '\r' && !unicode.Is(table, r) }},
			{`^\P{` + name + `}$`, func(r rune) bool { return !unicode.Is(table, r) }},
		} {
			expanded, err := expandUnicodeClasses(form.pattern)
			if err != nil {
				t.Fatal(err)
			}
			re := regexp2.MustCompile(expanded)
			for _, r := range runes {
				if r >= 0xD800 && r <= 0xDFFF {
					continue
				}
				got, err := re.MatchString(string(r))
				if err != nil {
					t.Fatal(err)
				}
				if got != form.want(r) {
					t.Errorf("%s on U+%04X: %v, want %v", form.pattern, r, got, !got)
				}
			}
		}
	}
	// Escapes and classes that are not general categories pass through.
	for _, pattern := range []string{`\\p{L}`, `[\]\p{Greek}]`, `\d+\s*`, `[a-z-]`} {
		if expanded, err := expandUnicodeClasses(pattern); err != nil || expanded != pattern {
			t.Errorf("expandUnicodeClasses(%q) = %q, %v; want it unchanged", pattern, expanded, err)
		}
	}
	if _, err := expandUnicodeClasses(`abc\`); err == nil {
		t.Error("a trailing backslash: want an error")
	}
}
