package piper

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// MaxTextBytes caps what one Phonemize call sends to espeak-ng.
const MaxTextBytes = 64 << 10

// ErrEspeak is wrapped when espeak-ng is missing or fails.
var ErrEspeak = errors.New("piper: espeak-ng")

// Espeak phonemizes with the espeak-ng command (Debian's espeak-ng
// package): `espeak-ng -q --ipa -v VOICE`, text on standard input, one
// line of IPA per clause on standard output.
type Espeak struct {
	// Binary is the command; empty means "espeak-ng" on PATH.
	Binary string
	// DataDir, when set, is passed as --path (the directory holding
	// espeak-ng-data), to use another dictionary than the system's.
	DataDir string
}

// Clause is one clause espeak-ng spoke: its phonemes and the punctuation
// that ended it ("" when none, e.g. an ellipsis or the end of the text).
type Clause struct {
	Phonemes   string
	Terminator string
	EndOfSent  bool
}

// Phonemize turns text into sentences of phonemes, each a list of single
// code points (NFD, so accents are phonemes of their own) as piper-tts
// gives them to its id map: clause punctuation is kept as a phoneme, and
// ",", ":" and ";" are followed by a space.
func (e Espeak) Phonemize(ctx context.Context, voice, text string) ([][]string, error) {
	clauses, err := e.Clauses(ctx, voice, text)
	if err != nil {
		return nil, err
	}
	var (
		out [][]string
		cur []string
	)
	for _, c := range clauses {
		s := c.Phonemes + c.Terminator
		if c.Terminator == "," || c.Terminator == ":" || c.Terminator == ";" {
			s += " "
		}
		for _, r := range norm.NFD.String(s) {
			cur = append(cur, string(r))
		}
		if c.EndOfSent {
			out = append(out, cur)
			cur = nil
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out, nil
}

// Clauses runs espeak-ng over text and pairs each output line with the
// punctuation that ended its clause in text.
func (e Espeak) Clauses(ctx context.Context, voice, text string) ([]Clause, error) {
	if len(text) > MaxTextBytes {
		return nil, fmt.Errorf("piper: text of %d bytes is over the %d-byte limit", len(text), MaxTextBytes)
	}
	if strings.TrimSpace(text) == "" {
		return nil, nil
	}
	bin := e.Binary
	if bin == "" {
		bin = "espeak-ng"
	}
	args := []string{"-q", "--ipa", "-v", voice, "--stdin"}
	if e.DataDir != "" {
		args = append([]string{"--path=" + e.DataDir}, args...)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	// espeak-ng reads standard input up to end of file; line breaks are
	// spaces to it, as they are to piper-tts.
	cmd.Stdin = strings.NewReader(text)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w: %v: %s", ErrEspeak, err, strings.TrimSpace(stderr.String()))
	}
	var lines []string
	for _, l := range strings.Split(stdout.String(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, linkI(l))
		}
	}
	ends := clauseEnds(text)
	clauses := make([]Clause, len(lines))
	for i, l := range lines {
		clauses[i].Phonemes = l
		if i < len(ends) {
			clauses[i].Terminator, clauses[i].EndOfSent = ends[i].term, ends[i].eos
		}
	}
	if n := len(clauses); n > 0 {
		// The text's end ends a sentence whatever ended its last clause.
		clauses[n-1].EndOfSent = true
	}
	return clauses, nil
}

type clauseEnd struct {
	term string
	eos  bool
}

// clauseEnds finds where espeak-ng ends clauses in text, in order, with
// the terminator piper-tts reports: ".", "?", "!" end a sentence; ",",
// ":", ";" end a clause; an ellipsis ends a clause with no terminator;
// a run of marks ("?!") reports its first. Punctuation ends a clause only
// when followed by white space or the end of the text (not "3.5"), after
// any closing quotes or brackets, and a lone full stop not before a
// lower-case word ("e.g. cash", "the dr. yesterday").
func clauseEnds(text string) []clauseEnd {
	rs := []rune(text)
	var ends []clauseEnd
	for i := 0; i < len(rs); i++ {
		if !strings.ContainsRune(".,?!:;", rs[i]) {
			continue
		}
		j := i
		for j < len(rs) && strings.ContainsRune(".,?!:;", rs[j]) {
			j++
		}
		k := j
		for k < len(rs) && strings.ContainsRune("\"')]}”’", rs[k]) {
			k++
		}
		if k < len(rs) && !unicode.IsSpace(rs[k]) {
			i = j - 1
			continue
		}
		run := string(rs[i:j])
		if run == "." && nextLower(rs[k:]) {
			// A full stop before a lower-case word is an abbreviation's.
			i = j - 1
			continue
		}
		switch {
		case strings.HasPrefix(run, ".."):
			ends = append(ends, clauseEnd{"", false})
		case run[0] == '.' || run[0] == '?' || run[0] == '!':
			ends = append(ends, clauseEnd{run[:1], true})
		default:
			ends = append(ends, clauseEnd{run[:1], false})
		}
		i = j - 1
	}
	return ends
}

// nextLower reports whether the first non-space rune of rs is lower case.
func nextLower(rs []rune) bool {
	for _, r := range rs {
		if !unicode.IsSpace(r) {
			return unicode.IsLower(r)
		}
	}
	return false
}

// linkVowels are the vowels before which newer espeak-ng (the 1.52 code
// piper-tts bundles) writes a linking "ʲ" after an i-vowel; the 1.51
// command-line tool does not, so linkI adds it.
var linkVowels = "aeiouæɐɑɒɔəɚɛɜɪʊʌᵻ"

// linkI inserts "ʲ" after an i-vowel ("i", "iː", "ɪ" not ending a
// diphthong) when the next phoneme, past spaces and stress marks, is a
// vowel: "ðɪ ˈɛnd" → "ðɪʲ ˈɛnd", "sˈiːɪŋ" → "sˈiːʲɪŋ". "iə" is one
// phoneme (no "ʲ"), as are "aɪ", "eɪ", "ɔɪ".
func linkI(s string) string {
	rs := []rune(s)
	var b strings.Builder
	for i := 0; i < len(rs); i++ {
		b.WriteRune(rs[i])
		end := i
		switch {
		case rs[i] == 'i':
			if i+1 < len(rs) && rs[i+1] == 'ː' {
				b.WriteRune('ː')
				i++
				end = i
			} else if i+1 < len(rs) && rs[i+1] == 'ə' {
				continue
			}
		case rs[i] == 'ɪ':
			if i > 0 && strings.ContainsRune("aeɔo", rs[i-1]) {
				continue
			}
		default:
			continue
		}
		k := end + 1
		for k < len(rs) && (rs[k] == ' ' || rs[k] == 'ˈ' || rs[k] == 'ˌ') {
			k++
		}
		if k < len(rs) && strings.ContainsRune(linkVowels, rs[k]) {
			b.WriteRune('ʲ')
		}
	}
	return b.String()
}

// IDs maps one sentence's phonemes to the voice's ids as piper-tts does:
// BOS, PAD, then each phoneme followed by PAD, then EOS. Phonemes missing
// from the map are skipped (piper-tts logs and skips them); they are
// returned so that a caller can say so.
func (c *Config) IDs(phonemes []string) (ids []int64, missing []string) {
	ids = append(ids, c.PhonemeIDMap[BOS]...)
	ids = append(ids, c.PhonemeIDMap[Pad]...)
	for _, p := range phonemes {
		m, ok := c.PhonemeIDMap[p]
		if !ok {
			missing = append(missing, p)
			continue
		}
		ids = append(ids, m...)
		ids = append(ids, c.PhonemeIDMap[Pad]...)
	}
	ids = append(ids, c.PhonemeIDMap[EOS]...)
	return ids, missing
}
