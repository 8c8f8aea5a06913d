package runner

import "strings"

// stopMatcher cuts generated text at the first stop sequence. Text that
// could still turn into a stop sequence is held back, so a client never
// sees part of a stop string.
type stopMatcher struct {
	stops   []string
	pending string // text not yet released
}

func newStopMatcher(stops []string) *stopMatcher {
	var s []string
	for _, x := range stops {
		if x != "" {
			s = append(s, x)
		}
	}
	return &stopMatcher{stops: s}
}

// Add takes newly decoded text and returns the text that is now safe to
// release; matched is the stop sequence found (then out is the text before
// it and generation should end).
func (m *stopMatcher) Add(text string) (out, matched string) {
	if len(m.stops) == 0 {
		return text, ""
	}
	m.pending += text
	first, which := -1, ""
	for _, s := range m.stops {
		if i := strings.Index(m.pending, s); i >= 0 && (first < 0 || i < first) {
			first, which = i, s
		}
	}
	if first >= 0 {
		out = m.pending[:first]
		m.pending = ""
		return out, which
	}
	hold := 0
	for _, s := range m.stops {
		hold = max(hold, suffixPrefixLen(m.pending, s))
	}
	out = m.pending[:len(m.pending)-hold]
	m.pending = m.pending[len(m.pending)-hold:]
	return out, ""
}

// Flush releases whatever is held back (generation ended for another
// reason).
func (m *stopMatcher) Flush() string {
	out := m.pending
	m.pending = ""
	return out
}

// suffixPrefixLen is the length of the longest suffix of text that is a
// proper prefix of stop.
func suffixPrefixLen(text, stop string) int {
	for n := min(len(text), len(stop)-1); n > 0; n-- {
		if strings.HasSuffix(text, stop[:n]) {
			return n
		}
	}
	return 0
}
