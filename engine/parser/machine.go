package parser

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
	pythonTag  = "<|python_tag|>"
)

// ender is called with a call's growing buffer (the same bytes, extended,
// on each call, so it may resume where it stopped). It returns the body
// length and how many bytes (body plus terminator) to consume, or n < 0
// while the body is incomplete.
type ender func(buf []byte) (n, consumed int)

// partialFn is called, like an ender, with a call's growing body. It
// returns the call's name and the longest prefix of its final Arguments text
// that is already certain (ok=false while the name is not known yet). Each
// result extends the previous one.
type partialFn func(body []byte) (name, args string, ok bool)

// rawCall is a parsed but not yet numbered tool call.
type rawCall struct{ name, args string }

// family describes one tagged output format for the shared state machine.
type family struct {
	think bool // <think>…</think> reasoning
	// thinkTags replace <think> and </think> when set (Gemma 4's thought
	// channel).
	thinkTags *[2]string
	// open are tags that start a call body in content state (and, when think
	// is set, also end reasoning when they appear unpaired inside it).
	open []string
	// drop are tags removed silently in content state (section markers).
	drop []string
	// end starts finding the end of a call body that began with openTag.
	end func(openTag string) ender
	// parse turns a complete body into calls; ok=false means malformed.
	// complete is false when called at Finish on an unterminated body.
	parse func(openTag, body string, complete bool) ([]rawCall, bool)
	// partial, when set, supports Options.StreamArguments (see partialFn).
	partial func(openTag string) partialFn
	// notCall, when set, tells a body that failed to parse but was never
	// meant as a call (llama3_json: a JSON answer); it is always content.
	notCall  func(body string) bool
	leadJSON bool // llama3_json: a call only at the start of the output
	trim     bool // trim whitespace around segments
}

type state int

const (
	stContent state = iota
	stReasoning
	stCall
	stLead // llama3_json: before the first non-space byte, or between calls
)

// machine is the shared streaming state machine behind every family.
type machine struct {
	fam        family
	opts       Options
	declared   map[string]bool
	st         state
	thinkOpen  string // the tags that open and close reasoning
	thinkClose string
	cTags      []string // tags recognised in content state
	rTags      []string // tags recognised in reasoning state
	buf        string   // unprocessed text outside calls
	call       []byte   // the current call's text after its open tag
	ender      ender
	partial    partialFn // nil unless streaming arguments
	openTag    string    // tag that opened the current call
	content    emitter
	reasoning  emitter
	nCalls     int
	bad        int // malformed calls dropped (ErrorOnMalformed, or after streaming began)
	// argument streaming of the current call (Options.StreamArguments)
	sCall *ToolCall // header already emitted; Arguments = streamed so far
	out   Output
}

func newMachine(f family, opts Options) *machine {
	m := &machine{fam: f, opts: opts, declared: map[string]bool{}, thinkOpen: thinkOpen, thinkClose: thinkClose}
	if f.thinkTags != nil {
		m.thinkOpen, m.thinkClose = f.thinkTags[0], f.thinkTags[1]
	}
	for _, t := range opts.Tools {
		m.declared[t] = true
	}
	m.cTags = append(m.cTags, f.open...)
	if f.think {
		m.cTags = append(m.cTags, m.thinkOpen)
	}
	m.cTags = append(m.cTags, f.drop...)
	m.rTags = append(append([]string{m.thinkClose}, f.open...), f.drop...)
	// Content is not trimmed at the very start: a plain answer passes
	// through exactly; only whitespace around tags is dropped.
	// Trailing whitespace is held back (to be dropped before a tool call)
	// only when tools are declared; otherwise it streams at once.
	m.content = emitter{trim: f.trim, holdTrailing: f.trim && len(opts.Tools) > 0}
	m.reasoning = emitter{trim: true, holdTrailing: true, atStart: true}
	switch {
	case f.think && opts.StartInReasoning:
		m.st = stReasoning
	case f.leadJSON && len(opts.Tools) > 0:
		m.st = stLead
	}
	return m
}

func (m *machine) Add(text string) Output {
	if m.st == stCall {
		m.call = append(m.call, text...)
	} else {
		m.buf += text
	}
	m.step(false)
	return m.take()
}

func (m *machine) Finish() (Output, error) {
	m.step(true)
	switch m.st {
	case stContent, stLead:
		m.out.Content += m.content.write(m.buf)
	case stReasoning:
		m.out.Reasoning += m.reasoning.write(m.buf)
	case stCall:
		m.streamPartial(m.call)
		m.finishCall(string(m.call), "", false)
	}
	m.buf = ""
	m.out.Content += m.content.flush()
	m.out.Reasoning += m.reasoning.end()
	out := m.take()
	if m.bad > 0 {
		return out, fmt.Errorf("%w (%d dropped)", ErrMalformedToolCall, m.bad)
	}
	return out, nil
}

func (m *machine) take() Output {
	o := m.out
	m.out = Output{}
	return o
}

// step advances the state machine over the buffered text as far as is
// certain. final (from Finish) lets the llama3_json lead state give up on a
// partial <|python_tag|>; Finish itself flushes what step held back.
func (m *machine) step(final bool) {
	for {
		switch m.st {
		case stLead:
			cut := " \t\r\n"
			if m.nCalls > 0 {
				cut += ";" // separator between llama3_json calls
			}
			t := strings.TrimLeft(m.buf, cut)
			switch {
			case t == "":
				return
			case t[0] == '{':
				m.buf = t
				m.enterCall("")
			case strings.HasPrefix(t, pythonTag):
				m.buf = t[len(pythonTag):]
				m.enterCall(pythonTag)
			case strings.HasPrefix(pythonTag, t) && !final:
				return
			default:
				m.st = stContent
			}
		case stContent:
			tags := m.cTags
			i, tag := findFirst(m.buf, tags)
			if i < 0 {
				n := len(m.buf) - holdback(m.buf, tags)
				m.out.Content += m.content.write(m.buf[:n])
				m.buf = m.buf[n:]
				return
			}
			m.out.Content += m.content.write(m.buf[:i])
			m.out.Content += m.content.end()
			m.buf = m.buf[i+len(tag):]
			switch {
			case tag == m.thinkOpen && m.fam.think:
				m.st = stReasoning
			case contains(m.fam.drop, tag):
				// section marker: removed
			default:
				m.enterCall(tag)
			}
		case stReasoning:
			tags := m.rTags
			i, tag := findFirst(m.buf, tags)
			if i < 0 {
				n := len(m.buf) - holdback(m.buf, tags)
				m.out.Reasoning += m.reasoning.write(m.buf[:n])
				m.buf = m.buf[n:]
				return
			}
			m.out.Reasoning += m.reasoning.write(m.buf[:i])
			m.out.Reasoning += m.reasoning.end()
			m.content.atStart = m.content.trim // the answer after </think> starts trimmed
			m.buf = m.buf[i+len(tag):]
			if tag == m.thinkClose || contains(m.fam.drop, tag) {
				m.st = stContent
			} else { // unpaired call tag ends reasoning
				m.enterCall(tag)
			}
		case stCall:
			n, c := m.ender(m.call)
			if n < 0 {
				m.streamPartial(m.call)
				return
			}
			m.streamPartial(m.call[:n]) // so the outcome never depends on chunking
			body, term := string(m.call[:n]), string(m.call[n:c])
			m.buf = string(m.call[c:])
			m.call = m.call[:0]
			m.finishCall(body, term, true)
		}
	}
}

// enterCall moves the unprocessed text into the call buffer.
func (m *machine) enterCall(tag string) {
	m.openTag, m.st = tag, stCall
	m.call = append(m.call[:0], m.buf...)
	m.buf = ""
	m.ender = m.fam.end(tag)
	m.partial = nil
	if m.opts.StreamArguments && m.fam.partial != nil {
		m.partial = m.fam.partial(tag)
	}
}

// finishCall validates a call body and emits calls or raw content, then
// returns to content (or, for llama3_json, lead) state.
func (m *machine) finishCall(body, term string, complete bool) {
	calls, ok := m.fam.parse(m.openTag, body, complete)
	next := stContent
	if s := m.sCall; s != nil {
		// Part of this call is already out: finish it if the complete body
		// agrees with what was streamed, else report it as malformed.
		m.sCall = nil
		if ok && calls[0].name == s.Name && strings.HasPrefix(calls[0].args, s.Arguments) {
			if rest := calls[0].args[len(s.Arguments):]; rest != "" {
				m.out.CallDeltas = append(m.out.CallDeltas, ToolCallDelta{Index: s.Index, ArgumentsFragment: rest})
			}
			s.Arguments = calls[0].args
			m.out.Calls = append(m.out.Calls, *s)
			calls = calls[1:]
		} else {
			m.bad++
			calls, ok = nil, true
		}
	}
	if ok {
		for _, c := range calls {
			m.emitCall(c)
		}
		if m.fam.leadJSON {
			next = stLead
		}
	} else if m.opts.ErrorOnMalformed && (m.fam.notCall == nil || !m.fam.notCall(body)) {
		m.bad++
	} else {
		m.out.Content += m.content.write(m.openTag + body + term)
		m.st = next
		return
	}
	m.content.atStart = m.content.trim
	m.st = next
}

// streamPartial emits the header and new argument text of an incomplete
// call under Options.StreamArguments.
func (m *machine) streamPartial(body []byte) {
	if m.partial == nil {
		return
	}
	name, args, ok := m.partial(body)
	if !ok {
		return
	}
	s := m.sCall
	if s == nil {
		s = &ToolCall{Index: m.nCalls, ID: m.opts.NewID(), Name: name, Undeclared: !m.declared[name]}
		m.nCalls++
		m.sCall = s
		m.out.CallDeltas = append(m.out.CallDeltas, ToolCallDelta{Index: s.Index, ID: s.ID, Name: s.Name})
	}
	if len(args) > len(s.Arguments) {
		m.out.CallDeltas = append(m.out.CallDeltas, ToolCallDelta{Index: s.Index, ArgumentsFragment: args[len(s.Arguments):]})
		s.Arguments = args
	}
}

func (m *machine) emitCall(c rawCall) {
	tc := ToolCall{Index: m.nCalls, ID: m.opts.NewID(), Name: c.name, Arguments: c.args, Undeclared: !m.declared[c.name]}
	m.nCalls++
	m.out.Calls = append(m.out.Calls, tc)
	m.out.CallDeltas = append(m.out.CallDeltas,
		ToolCallDelta{Index: tc.Index, ID: tc.ID, Name: tc.Name},
		ToolCallDelta{Index: tc.Index, ArgumentsFragment: tc.Arguments})
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// findFirst returns the earliest occurrence of any tag in s.
func findFirst(s string, tags []string) (int, string) {
	best, bt := -1, ""
	for _, t := range tags {
		if i := strings.Index(s, t); i >= 0 && (best < 0 || i < best || i == best && len(t) > len(bt)) {
			best, bt = i, t
		}
	}
	return best, bt
}

// holdback returns the length of the longest suffix of s that is a proper
// prefix of one of tags.
func holdback(s string, tags []string) int {
	best := 0
	for _, t := range tags {
		for k := min(len(s), len(t)-1); k > best; k-- {
			if strings.HasSuffix(s, t[:k]) {
				best = k
				break
			}
		}
	}
	return best
}

// emitter streams one channel (content or reasoning), trimming whitespace at
// segment edges and never emitting an incomplete UTF-8 sequence.
type emitter struct {
	trim         bool
	holdTrailing bool   // hold trailing whitespace until the segment goes on
	atStart      bool   // drop leading whitespace
	pend         string // held: trailing whitespace and/or an incomplete rune
}

func isSpace(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }

func (e *emitter) write(s string) string {
	s = e.pend + s
	e.pend = ""
	if e.atStart {
		s = strings.TrimLeftFunc(s, isSpace)
		if s == "" {
			return ""
		}
		e.atStart = false
	}
	j := len(s) - incompleteTail(s)
	k := j
	if e.holdTrailing {
		k = len(strings.TrimRightFunc(s[:j], isSpace))
	}
	e.pend = s[k:]
	return s[:k]
}

// end closes a segment: held trailing whitespace is dropped (when trimming)
// and the next segment starts trimmed.
func (e *emitter) end() string {
	p := e.pend
	e.pend = ""
	if e.trim {
		p = strings.TrimLeftFunc(p, isSpace)
		e.atStart = true
	}
	return p
}

// flush emits everything held (end of output for content).
func (e *emitter) flush() string {
	p := e.pend
	e.pend = ""
	if e.atStart && e.trim {
		return ""
	}
	return p
}

// incompleteTail is the length of an incomplete UTF-8 sequence ending s.
func incompleteTail(s string) int {
	for k := 1; k <= 3 && k <= len(s); k++ {
		c := s[len(s)-k]
		if c < 0x80 {
			return 0
		}
		if c >= 0xC0 { // leading byte
			need := 2
			if c >= 0xF0 {
				need = 4
			} else if c >= 0xE0 {
				need = 3
			}
			if need > k && !utf8.FullRuneInString(s[len(s)-k:]) {
				return k
			}
			return 0
		}
	}
	return 0
}
