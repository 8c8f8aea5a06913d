package demo

import (
	"sort"
	"strings"
	"unicode"
)

// byteAlphabet returns GPT-2's bytes_to_unicode table, which maps every
// byte to a printable rune (bytes 33–126, 161–172 and 174–255 to
// themselves, the other 68 to U+0100 onwards in byte order), and the order
// byte-level vocabularies list the 256 byte tokens in: the self-mapped
// bytes first, then the others.
func byteAlphabet() (table [256]rune, order []byte) {
	self := func(b int) bool { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255) }
	next := rune(256)
	for b := range 256 {
		if self(b) {
			table[b] = rune(b)
			order = append(order, byte(b))
		}
	}
	for b := range 256 {
		if !self(b) {
			table[b] = next
			next++
			order = append(order, byte(b))
		}
	}
	return table, order
}

// pretokenize splits text into pieces roughly as the Qwen2 pre-tokenizer
// regex does: letter runs with one optional leading non-letter, single
// digits, punctuation runs with an optional leading space and trailing
// newlines, and whitespace runs that leave their last space to the next
// word. The trainer only needs realistic pieces, not the exact split.
func pretokenize(text string) []string {
	rs := []rune(text)
	isPunct := func(r rune) bool { return !unicode.IsSpace(r) && !unicode.IsLetter(r) && !unicode.IsNumber(r) }
	isNL := func(r rune) bool { return r == '\n' || r == '\r' }
	letters := func(j int) int {
		for j < len(rs) && unicode.IsLetter(rs[j]) {
			j++
		}
		return j
	}
	var out []string
	for i := 0; i < len(rs); {
		r := rs[i]
		j := i + 1
		switch {
		case unicode.IsLetter(r):
			j = letters(i)
		case !isNL(r) && !unicode.IsNumber(r) && j < len(rs) && unicode.IsLetter(rs[j]):
			j = letters(j)
		case unicode.IsNumber(r):
		case isPunct(r) || (r == ' ' && j < len(rs) && isPunct(rs[j])):
			for j < len(rs) && isPunct(rs[j]) {
				j++
			}
			for j < len(rs) && isNL(rs[j]) {
				j++
			}
		default: // whitespace
			for j < len(rs) && unicode.IsSpace(rs[j]) {
				j++
			}
			lastNL := -1
			for k := i; k < j; k++ {
				if isNL(rs[k]) {
					lastNL = k
				}
			}
			switch {
			case lastNL >= 0:
				j = lastNL + 1
			case j < len(rs) && j-i > 1:
				j-- // leave one space to prefix the next piece
			}
		}
		out = append(out, string(rs[i:j]))
		i = j
	}
	return out
}

// trainBPE learns up to n merges from text, byte-level: each piece is
// mapped through the byte alphabet, then the most frequent adjacent pair
// (ties broken by the pair's strings, so training is deterministic) is
// merged, until n merges or no pair occurs twice.
func trainBPE(text string, n int) [][2]string {
	table, _ := byteAlphabet()
	counts := make(map[string]int)
	for _, p := range pretokenize(text) {
		var sb strings.Builder
		for _, b := range []byte(p) {
			sb.WriteRune(table[b])
		}
		counts[sb.String()]++
	}
	type word struct {
		syms  []string
		count int
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	words := make([]word, len(keys))
	for i, k := range keys {
		for _, r := range k {
			words[i].syms = append(words[i].syms, string(r))
		}
		words[i].count = counts[k]
	}
	var merges [][2]string
	for len(merges) < n {
		pairs := make(map[[2]string]int)
		for _, w := range words {
			for i := 0; i+1 < len(w.syms); i++ {
				pairs[[2]string{w.syms[i], w.syms[i+1]}] += w.count
			}
		}
		var best [2]string
		bestN := 0
		for p, c := range pairs {
			if c > bestN || (c == bestN && (p[0] < best[0] || (p[0] == best[0] && p[1] < best[1]))) {
				best, bestN = p, c
			}
		}
		if bestN < 2 {
			break
		}
		merges = append(merges, best)
		joined := best[0] + best[1]
		for wi := range words {
			s := words[wi].syms
			out := s[:0]
			for i := 0; i < len(s); i++ {
				if i+1 < len(s) && s[i] == best[0] && s[i+1] == best[1] {
					out = append(out, joined)
					i++
				} else {
					out = append(out, s[i])
				}
			}
			words[wi].syms = out
		}
	}
	return merges
}
