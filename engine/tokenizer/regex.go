package tokenizer

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/dlclark/regexp2/v2"
)

// regexSplitter runs a pre-tokenizer pattern that has no hand-written
// scanner on regexp2, a backtracking engine with look-around and
// leftmost-first alternation like the Oniguruma engine of HF tokenizers.
type regexSplitter struct {
	re *regexp2.Regexp
}

func compileSplitPattern(pattern string) (*regexSplitter, error) {
	expanded, err := expandUnicodeClasses(pattern)
	if err != nil {
		return nil, err
	}
	// Backtracking over a long run of white space needs a deep stack; the
	// text bounds it, so lift the engine's default limit.
	re, err := regexp2.Compile(expanded, regexp2.OptionMaxBacktrackingStackSize(-1))
	if err != nil {
		return nil, fmt.Errorf("compile pattern %q: %w", pattern, err)
	}
	return &regexSplitter{re: re}, nil
}

// matches returns the byte ranges of the matches of the pattern in s. On an
// engine error (which the options above should rule out) the rest of the
// text is left unmatched.
func (r *regexSplitter) matches(s string) [][]int {
	found, _ := r.re.FindAllStringIndex(s, -1)
	return found
}

// unicodeCategoryTables are the general categories the Unicode 16 tables
// cover; regexp2 would otherwise use Go's older tables.
var unicodeCategoryTables = map[string]*unicode.RangeTable{
	"L": letterTable,
	"M": markTable,
	"N": numberTable,
	"P": punctTable,
	"S": symbolTable,
}

// expandUnicodeClasses rewrites \p{L}, \p{M}, \p{N}, \p{P} and \p{S} (also
// \pL and friends, and \P{...} outside brackets) into explicit ranges from
// the Unicode 16 tables. Other syntax is kept as is.
func expandUnicodeClasses(pattern string) (string, error) {
	var out strings.Builder
	inClass := false
	classStart := false // just after '[' or '[^': a ']' here is literal
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		switch {
		case c == '\\':
			if i+1 >= len(pattern) {
				return "", fmt.Errorf("pattern %q ends with a backslash", pattern)
			}
			name, length := unicodeClassName(pattern[i+1:])
			table := unicodeCategoryTables[name]
			negated := pattern[i+1] == 'P'
			if table == nil || (negated && inClass) {
				out.WriteString(pattern[i : i+2])
				i++
				classStart = false
				continue
			}
			ranges := classRanges(table)
			switch {
			case inClass:
				out.WriteString(ranges)
			case negated:
				out.WriteString("[^" + ranges + "]")
			default:
				out.WriteString("[" + ranges + "]")
			}
			i += length
			classStart = false
		case c == '[' && !inClass:
			inClass, classStart = true, true
			out.WriteByte(c)
			if i+1 < len(pattern) && pattern[i+1] == '^' {
				out.WriteByte('^')
				i++
			}
		case c == ']' && inClass && !classStart:
			inClass = false
			out.WriteByte(c)
		default:
			classStart = false
			out.WriteByte(c)
		}
	}
	return out.String(), nil
}

// unicodeClassName parses "p{Name}", "P{Name}", "pX" or "PX" at the start of
// s and returns the name and the length consumed, or "" if s is something
// else.
func unicodeClassName(s string) (string, int) {
	if len(s) < 2 || (s[0] != 'p' && s[0] != 'P') {
		return "", 0
	}
	if s[1] != '{' {
		return s[1:2], 2
	}
	end := strings.IndexByte(s, '}')
	if end < 0 {
		return "", 0
	}
	return s[2:end], end + 1
}

// classRanges renders a table as the inside of a bracket expression.
func classRanges(table *unicode.RangeTable) string {
	var b strings.Builder
	add := func(lo, hi rune) {
		b.WriteString(classRune(lo))
		if hi > lo {
			b.WriteByte('-')
			b.WriteString(classRune(hi))
		}
	}
	for _, r := range table.R16 {
		add(rune(r.Lo), rune(r.Hi))
	}
	for _, r := range table.R32 {
		add(rune(r.Lo), rune(r.Hi))
	}
	return b.String()
}

// classRune writes a rune so that it means itself inside brackets.
func classRune(r rune) string {
	if r < 0x10000 {
		return fmt.Sprintf(`\u%04X`, r)
	}
	return string(r)
}
