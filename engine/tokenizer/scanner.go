package tokenizer

import "unicode/utf8"

// The pre-tokenizer patterns below are recognised by their exact text and
// run on hand-written scanners instead of a regex engine: Go's regexp has no
// look-ahead, and a scanner is many times faster than backtracking. Each
// scanner reproduces the leftmost-first alternation of its pattern; the
// tests check them against the regex engine on random strings.
const (
	// patternQwen2 is the Split pattern of Qwen2, Qwen2.5 and Qwen3: numbers
	// are split into single digits.
	patternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patternLlama3 is the Split pattern of Llama 3: digit groups of up to
	// three.
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patternGPT2 is the pattern of the ByteLevel pre-tokenizer when
	// use_regex is true.
	patternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// splitter cuts a string into the pieces a Split pre-tokenizer with the
// Isolated behaviour makes: every match and every gap between matches.
type splitter interface {
	split(s string, dst []string) []string
}

// handScanner returns the scanner for a pattern it knows, or nil.
func handScanner(pattern string) splitter {
	switch pattern {
	case patternQwen2:
		return llamaScanner{maxDigits: 1}
	case patternLlama3:
		return llamaScanner{maxDigits: 3}
	case patternGPT2:
		return gpt2Scanner{}
	}
	return nil
}

// decodeAt returns the rune at s[i] and its width; i must be < len(s).
func decodeAt(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// runClass returns the end of the run of runes of class want starting at i.
func runClass(s string, i int, want charClass) int {
	for i < len(s) {
		r, n := decodeAt(s, i)
		if classOf(r)&want == 0 {
			break
		}
		i += n
	}
	return i
}

// runOther returns the end of the run of runes that are neither letters,
// numbers nor white space, starting at i.
func runOther(s string, i int) int {
	for i < len(s) {
		r, n := decodeAt(s, i)
		if classOf(r)&(classLetter|classNumber|classSpace) != 0 {
			break
		}
		i += n
	}
	return i
}

// runNewlines returns the end of the run of '\r' and '\n' starting at i.
func runNewlines(s string, i int) int {
	for i < len(s) && (s[i] == '\r' || s[i] == '\n') {
		i++
	}
	return i
}

// contractionLen returns the length of the contraction suffix ("s", "t",
// "re", "ve", "m", "ll", "d") at s[i:] following an apostrophe, or 0.
// foldCase also accepts upper case and 'ſ' (U+017F), which Unicode case
// folding maps to 's'.
func contractionLen(s string, i int, foldCase bool) int {
	if i >= len(s) {
		return 0
	}
	lower := func(c byte) byte {
		if foldCase && 'A' <= c && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	second := func(want byte) bool {
		return i+1 < len(s) && lower(s[i+1]) == want
	}
	switch lower(s[i]) {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if second('e') {
			return 2
		}
	case 'l':
		if second('l') {
			return 2
		}
	case 0xC5: // 'ſ' is C5 BF
		if foldCase && i+1 < len(s) && s[i+1] == 0xBF {
			return 2
		}
	}
	return 0
}

// whitespaceMatch handles the whitespace alternatives at i, where s[i] is
// white space and no earlier alternative matched. withNewlines adds the
// `\s*[\r\n]+` alternative of the Llama 3/Qwen2 pattern before
// `\s+(?!\S)|\s+`. It returns the end of the match.
func whitespaceMatch(s string, i int, withNewlines bool) int {
	end, lastStart, afterNewline := i, i, -1
	for end < len(s) {
		r, n := decodeAt(s, end)
		if classOf(r)&classSpace == 0 {
			break
		}
		if r == '\r' || r == '\n' {
			afterNewline = end + n
		}
		lastStart = end
		end += n
	}
	switch {
	case withNewlines && afterNewline >= 0:
		// \s*[\r\n]+: up to the last newline of the run.
		return afterNewline
	case end == len(s):
		// \s+(?!\S) at the end of the text.
		return end
	case lastStart > i:
		// \s+(?!\S): leave the last white space to the next piece.
		return lastStart
	default:
		// \s+ of a single white space before a non-space.
		return end
	}
}

// llamaScanner runs patternLlama3 (maxDigits 3) or patternQwen2 (maxDigits 1).
type llamaScanner struct{ maxDigits int }

func (sc llamaScanner) split(s string, dst []string) []string {
	for i := 0; i < len(s); {
		end := sc.matchAt(s, i)
		dst = append(dst, s[i:end])
		i = end
	}
	return dst
}

// matchAt returns the end of the match starting at i. Every position starts
// a match, so the pieces cover the text.
func (sc llamaScanner) matchAt(s string, i int) int {
	r, n := decodeAt(s, i)
	class := classOf(r)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r == '\'' {
		if l := contractionLen(s, i+1, true); l > 0 {
			return i + 1 + l
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if class&classLetter != 0 {
		return runClass(s, i+n, classLetter)
	}
	if r != '\r' && r != '\n' && class&classNumber == 0 && i+n < len(s) {
		if r2, n2 := decodeAt(s, i+n); classOf(r2)&classLetter != 0 {
			return runClass(s, i+n+n2, classLetter)
		}
	}
	// \p{N}{1,maxDigits}
	if class&classNumber != 0 {
		end := i + n
		for count := 1; count < sc.maxDigits && end < len(s); count++ {
			r2, n2 := decodeAt(s, end)
			if classOf(r2)&classNumber == 0 {
				break
			}
			end += n2
		}
		return end
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	if r == ' ' && i+1 < len(s) {
		if r2, _ := decodeAt(s, i+1); classOf(r2)&(classLetter|classNumber|classSpace) == 0 {
			return runNewlines(s, runOther(s, i+1))
		}
	}
	if class&classSpace == 0 {
		return runNewlines(s, runOther(s, i+n))
	}
	// \s*[\r\n]+|\s+(?!\S)|\s+
	return whitespaceMatch(s, i, true)
}

// gpt2Scanner runs patternGPT2.
type gpt2Scanner struct{}

func (gpt2Scanner) split(s string, dst []string) []string {
	for i := 0; i < len(s); {
		end := gpt2MatchAt(s, i)
		dst = append(dst, s[i:end])
		i = end
	}
	return dst
}

func gpt2MatchAt(s string, i int) int {
	r, n := decodeAt(s, i)
	// 's|'t|'re|'ve|'m|'ll|'d
	if r == '\'' {
		if l := contractionLen(s, i+1, false); l > 0 {
			return i + 1 + l
		}
	}
	// ` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+`: the optional space belongs to
	// whichever run follows it.
	start := i
	if r == ' ' && i+1 < len(s) {
		r2, n2 := decodeAt(s, i+1)
		if classOf(r2)&classSpace == 0 {
			start, r, n = i+1, r2, n2
		}
	}
	class := classOf(r)
	switch {
	case class&classLetter != 0:
		return runClass(s, start+n, classLetter)
	case class&classNumber != 0:
		return runClass(s, start+n, classNumber)
	case class&classSpace == 0:
		return runOther(s, start+n)
	}
	// \s+(?!\S)|\s+
	return whitespaceMatch(s, i, false)
}
