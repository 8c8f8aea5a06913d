package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// preTokenizer cuts normalized text into the pieces BPE encodes one by one.
type preTokenizer struct {
	steps []preTokenizeStep
	// byteLevel is set when a ByteLevel step ends the chain: pieces are then
	// encoded byte by byte in the byte-level alphabet.
	byteLevel bool
}

// preTokenizeStep refines each piece into smaller ones.
type preTokenizeStep interface {
	// apply appends the pieces s is cut into to dst.
	apply(s string, dst []string) []string
}

// run appends the pieces of s to dst, using tmp as scratch; it returns both
// slices for reuse. atStart says whether s begins the original text (not
// after an added token), which Metaspace's "first" scheme looks at.
func (p *preTokenizer) run(s string, atStart bool, dst, tmp []string) (pieces, scratch []string) {
	dst = append(dst[:0], s)
	for _, step := range p.steps {
		tmp = tmp[:0]
		for i, piece := range dst {
			if sa, ok := step.(startAware); ok {
				tmp = sa.applyAt(piece, atStart && i == 0, tmp)
			} else {
				tmp = step.apply(piece, tmp)
			}
		}
		dst, tmp = tmp, dst
	}
	return dst, tmp
}

type patternJSON struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

type preTokenizerJSON struct {
	Type           string            `json:"type"`
	PreTokenizers  []json.RawMessage `json:"pretokenizers"`
	Pattern        *patternJSON      `json:"pattern"`
	Behavior       string            `json:"behavior"`
	Invert         bool              `json:"invert"`
	AddPrefixSpace bool              `json:"add_prefix_space"`
	UseRegex       *bool             `json:"use_regex"`
}

// buildPreTokenizer builds the pre-tokenizer of a tokenizer.json
// "pre_tokenizer" value; null keeps the text whole.
func buildPreTokenizer(raw json.RawMessage) (*preTokenizer, error) {
	p := &preTokenizer{}
	if isNull(raw) {
		return p, nil
	}
	if err := p.add(raw); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *preTokenizer) add(raw json.RawMessage) error {
	var cfg preTokenizerJSON
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return err
	}
	if p.byteLevel {
		return errors.New("a ByteLevel pre-tokenizer must come last")
	}
	switch cfg.Type {
	case "Sequence":
		for i, sub := range cfg.PreTokenizers {
			if err := p.add(sub); err != nil {
				return fmt.Errorf("pretokenizers[%d]: %w", i, err)
			}
		}
		return nil
	case "Split":
		step, err := newSplitStep(cfg)
		if err != nil {
			return err
		}
		p.steps = append(p.steps, step)
		return nil
	case "Metaspace":
		step, err := newMetaspaceStep(raw)
		if err != nil {
			return err
		}
		p.steps = append(p.steps, step)
		return nil
	case "BertPreTokenizer":
		p.steps = append(p.steps, bertPreTokenizer{})
		return nil
	case "WhitespaceSplit":
		p.steps = append(p.steps, whitespaceSplit{})
		return nil
	case "ByteLevel":
		useRegex := cfg.UseRegex == nil || *cfg.UseRegex
		if cfg.AddPrefixSpace || useRegex {
			p.steps = append(p.steps, byteLevelStep{addPrefixSpace: cfg.AddPrefixSpace, useRegex: useRegex})
		}
		p.byteLevel = true
		return nil
	}
	return fmt.Errorf("unsupported pre-tokenizer type %q", cfg.Type)
}

// byteLevelStep is the splitting part of the ByteLevel pre-tokenizer: an
// optional space in front of every piece, then the GPT-2 pattern.
type byteLevelStep struct {
	addPrefixSpace bool
	useRegex       bool
}

func (b byteLevelStep) apply(s string, dst []string) []string {
	if b.addPrefixSpace && !strings.HasPrefix(s, " ") {
		s = " " + s
	}
	if !b.useRegex {
		return append(dst, s)
	}
	return gpt2Scanner{}.split(s, dst)
}

// splitBehavior says what a Split pre-tokenizer does with the matches.
type splitBehavior int

const (
	splitIsolated splitBehavior = iota
	splitRemoved
	splitMergedWithPrevious
	splitMergedWithNext
	splitContiguous
)

var splitBehaviors = map[string]splitBehavior{
	"Isolated":           splitIsolated,
	"Removed":            splitRemoved,
	"MergedWithPrevious": splitMergedWithPrevious,
	"MergedWithNext":     splitMergedWithNext,
	"Contiguous":         splitContiguous,
}

// splitStep is a Split pre-tokenizer.
type splitStep struct {
	scanner  splitter       // a hand-written scanner for the pattern, or nil
	regex    *regexSplitter // the pattern on the regex engine, or nil
	literal  string         // a String pattern
	behavior splitBehavior
	invert   bool
}

func newSplitStep(cfg preTokenizerJSON) (*splitStep, error) {
	behavior, ok := splitBehaviors[cfg.Behavior]
	if !ok {
		return nil, fmt.Errorf("split: unsupported behavior %q", cfg.Behavior)
	}
	step := &splitStep{behavior: behavior, invert: cfg.Invert}
	switch {
	case cfg.Pattern == nil:
		return nil, errors.New("split: missing pattern")
	case cfg.Pattern.Regex != nil:
		step.scanner = handScanner(*cfg.Pattern.Regex)
		if step.scanner == nil {
			re, err := compileSplitPattern(*cfg.Pattern.Regex)
			if err != nil {
				return nil, fmt.Errorf("split: %w", err)
			}
			step.regex = re
		}
	case cfg.Pattern.String != nil:
		step.literal = *cfg.Pattern.String
	default:
		return nil, errors.New("split: pattern has neither Regex nor String")
	}
	return step, nil
}

// span is a part of a piece, and whether the pattern matched it.
type span struct {
	start, end int
	match      bool
}

func (st *splitStep) apply(s string, dst []string) []string {
	if st.scanner != nil && st.behavior == splitIsolated && !st.invert {
		return st.scanner.split(s, dst)
	}
	spans := st.spans(s)
	if st.invert {
		for i := range spans {
			spans[i].match = !spans[i].match
		}
	}
	return appendPieces(s, applyBehavior(spans, st.behavior), dst)
}

// spans cuts s into matches and the gaps between them.
func (st *splitStep) spans(s string) []span {
	var spans []span
	prev := 0
	addMatch := func(start, end int) {
		if start > prev {
			spans = append(spans, span{prev, start, false})
		}
		spans = append(spans, span{start, end, true})
		prev = end
	}
	switch {
	case st.scanner != nil:
		for _, piece := range st.scanner.split(s, nil) {
			addMatch(prev, prev+len(piece))
		}
	case st.regex != nil:
		for _, m := range st.regex.matches(s) {
			if m[0] < prev || m[1] < m[0] || m[1] > len(s) {
				break
			}
			addMatch(m[0], m[1])
		}
	case st.literal != "":
		for {
			i := strings.Index(s[prev:], st.literal)
			if i < 0 {
				break
			}
			addMatch(prev+i, prev+i+len(st.literal))
		}
	}
	if prev < len(s) {
		spans = append(spans, span{prev, len(s), false})
	}
	return spans
}

// applyBehavior turns matches and gaps into the pieces to keep, which it
// marks with match == false (as HF does, "match" now means "remove").
func applyBehavior(spans []span, behavior splitBehavior) []span {
	out := make([]span, 0, len(spans))
	switch behavior {
	case splitIsolated:
		for _, sp := range spans {
			out = append(out, span{sp.start, sp.end, false})
		}
	case splitRemoved:
		out = append(out, spans...)
	case splitContiguous, splitMergedWithPrevious:
		previousMatch := false
		for _, sp := range spans {
			merge := sp.match == previousMatch
			if behavior == splitMergedWithPrevious {
				merge = sp.match && !previousMatch
			}
			if merge && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, span{sp.start, sp.end, false})
			}
			previousMatch = sp.match
		}
	case splitMergedWithNext:
		previousMatch := false
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.match && !previousMatch && len(out) > 0 {
				out[len(out)-1].start = sp.start
			} else {
				out = append(out, span{sp.start, sp.end, false})
			}
			previousMatch = sp.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out
}

// appendPieces appends the non-empty kept spans of s to dst.
func appendPieces(s string, spans []span, dst []string) []string {
	for _, sp := range spans {
		if !sp.match && sp.end > sp.start {
			dst = append(dst, s[sp.start:sp.end])
		}
	}
	return dst
}

// whitespaceSplit is HF's WhitespaceSplit: pieces separated by white
// space (Rust's char::is_whitespace), which is dropped.
type whitespaceSplit struct{}

func (whitespaceSplit) apply(s string, dst []string) []string {
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return unicode.Is(unicode.White_Space, r) }) {
		dst = append(dst, f)
	}
	return dst
}
