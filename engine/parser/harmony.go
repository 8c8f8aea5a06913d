package parser

import "strings"

// Harmony's markers (special tokens of gpt-oss's o200k_harmony; the
// detokenizer keeps them in the text, see Markers).
const (
	hStart     = "<|start|>"
	hChannel   = "<|channel|>"
	hMessage   = "<|message|>"
	hEnd       = "<|end|>"
	hCall      = "<|call|>"
	hReturn    = "<|return|>"
	hConstrain = "<|constrain|>"
)

// harmonyMarkers are all of them; harmonyEnds end a message body (a
// header marker too: a model that skipped <|end|> starts its next message).
// harmonyBodyStops are what a body looks for: its ends, and the markers
// that have no place in a body (<|message|>, <|constrain|>), which are
// dropped, so that no marker ever shows in content or reasoning.
var (
	harmonyMarkers   = []string{hStart, hChannel, hMessage, hEnd, hCall, hReturn, hConstrain}
	harmonyEnds      = []string{hEnd, hCall, hReturn, hStart, hChannel}
	harmonyBodyStops = []string{hEnd, hCall, hReturn, hStart, hChannel, hMessage, hConstrain}
)

// maxHarmonyHeader bounds a message header (role, recipient, channel,
// content type): text that runs longer without <|message|> is not a
// header, and comes out as content.
const maxHarmonyHeader = 256

// harmonySeparator joins the bodies of two messages of the same kind
// (two analysis messages, or a preamble and an answer).
const harmonySeparator = "\n\n"

type harmonyKind int

const (
	hkHeader    harmonyKind = iota // reading a header, up to <|message|>
	hkReasoning                    // an analysis message
	hkContent                      // final, a preamble on commentary, or an unknown channel
	hkCall                         // a message to a tool: its body is the arguments
)

// harmony parses gpt-oss's harmony output. The prompt ends with
// "<|start|>assistant", so the output is a sequence of messages, each a
// header ("<|channel|>analysis", " to=functions.NAME<|channel|>commentary
// json", "<|start|>assistant<|channel|>final", ...) then <|message|>, the
// body, and <|end|> (or <|call|>/<|return|>, which end the generation and
// so are usually not in the text). analysis → Reasoning; final, commentary
// without a recipient (a preamble) and unknown channels → Content; a
// recipient (to=functions.NAME, in the role part or after the channel) →
// a tool call whose body is the JSON arguments. Bodies are kept exactly
// (no trimming); two bodies of the same kind are joined by a blank line.
type harmony struct {
	opts   Options
	kind   harmonyKind
	buf    string // text not yet decided
	header string // the current header so far
	body   strings.Builder
	name   string // the current call's tool name
	sent   [2]bool
	sep    bool // the current message must start with harmonySeparator
	out    Output
	index  int
	failed bool
}

func newHarmony(o Options) Parser { return &harmony{opts: o} }

func (h *harmony) Add(text string) Output {
	h.buf += text
	h.step(false)
	return h.take()
}

func (h *harmony) Finish() (Output, error) {
	h.step(true)
	switch h.kind {
	case hkHeader:
		// A header never completed: text of a model that ignored the
		// format comes out as content; an unfinished header is dropped.
		if h.header != "" && !strings.Contains(h.header, "<|") {
			h.emit(hkContent, h.header)
		}
	case hkCall:
		h.endCall("")
	}
	h.header = ""
	out := h.take()
	if h.failed {
		return out, ErrMalformedToolCall
	}
	return out, nil
}

func (h *harmony) take() Output {
	o := h.out
	h.out = Output{}
	return o
}

// step consumes as much of buf as can be decided; final means no more
// text will come.
func (h *harmony) step(final bool) {
	for h.buf != "" {
		if h.kind == hkHeader {
			i := strings.Index(h.buf, hMessage)
			keep := 0
			if i < 0 && !final {
				keep = holdback(h.buf, []string{hMessage})
			}
			if (i < 0 && len(h.header)+len(h.buf)-keep > maxHarmonyHeader) || (i >= 0 && len(h.header)+i > maxHarmonyHeader) {
				// Not a header: the text comes out as content.
				h.kind, h.buf, h.header = hkContent, h.header+h.buf, ""
				h.sep = h.sent[1]
				continue
			}
			if i < 0 {
				h.header += h.buf[:len(h.buf)-keep]
				h.buf = h.buf[len(h.buf)-keep:]
				return
			}
			h.header += h.buf[:i]
			h.buf = h.buf[i+len(hMessage):]
			h.open()
			continue
		}
		i, tag := findFirst(h.buf, harmonyBodyStops)
		if i < 0 {
			keep := 0
			if !final {
				keep = holdback(h.buf, harmonyBodyStops)
				keep += incompleteTail(h.buf[:len(h.buf)-keep])
			}
			h.part(h.buf[:len(h.buf)-keep])
			h.buf = h.buf[len(h.buf)-keep:]
			return
		}
		h.part(h.buf[:i])
		if tag == hMessage || tag == hConstrain {
			h.buf = h.buf[i+len(tag):] // stray: dropped
			continue
		}
		rest := h.buf[i+len(tag):]
		if tag == hStart || tag == hChannel {
			rest = h.buf[i:] // the next header begins here
		}
		h.buf = rest
		if h.kind == hkCall {
			h.endCall(tag)
		}
		h.kind = hkHeader
		h.header = ""
	}
}

// open starts the message whose header was just read.
func (h *harmony) open() {
	hd := strings.ReplaceAll(h.header, hConstrain, " ")
	hd = strings.ReplaceAll(hd, hStart, " ")
	channel, recipient := "", ""
	if i := strings.Index(hd, hChannel); i >= 0 {
		if f := strings.Fields(strings.ReplaceAll(hd[i+len(hChannel):], hChannel, " ")); len(f) > 0 {
			channel = f[0]
		}
	}
	for _, f := range strings.Fields(strings.ReplaceAll(hd, hChannel, " ")) {
		if r, ok := strings.CutPrefix(f, "to="); ok && recipient == "" {
			recipient = r
		}
	}
	switch {
	case recipient != "" && recipient != "assistant":
		h.kind, h.name = hkCall, recipient
		if n, ok := strings.CutPrefix(recipient, "functions."); ok {
			h.name = n
		}
		h.body.Reset()
		return
	case channel == "analysis":
		h.kind = hkReasoning
	default:
		h.kind = hkContent
	}
	h.sep = h.sent[h.kind-hkReasoning]
}

// part handles body text of the current message.
func (h *harmony) part(s string) {
	if s == "" {
		return
	}
	if h.kind == hkCall {
		h.body.WriteString(s)
		return
	}
	if h.sep {
		s = harmonySeparator + s
		h.sep = false
	}
	h.emit(h.kind, s)
}

func (h *harmony) emit(kind harmonyKind, s string) {
	if kind == hkReasoning {
		h.out.Reasoning += s
	} else {
		h.out.Content += s
	}
	h.sent[kind-hkReasoning] = true
}

// endCall validates the call just read (tag is what ended it, "" at the
// end of the output) and emits it, or its text as content when its
// arguments are not a JSON object.
func (h *harmony) endCall(tag string) {
	body := h.body.String()
	h.body.Reset()
	args, ok := argsObject([]byte(body))
	if !ok {
		if h.opts.ErrorOnMalformed {
			h.failed = true
			return
		}
		raw := h.header + hMessage + body
		if tag == hEnd || tag == hCall || tag == hReturn {
			raw += tag
		}
		h.emit(hkContent, raw)
		return
	}
	c := ToolCall{Index: h.index, ID: h.opts.NewID(), Name: h.name, Arguments: args, Undeclared: !contains(h.opts.Tools, h.name)}
	h.index++
	h.out.Calls = append(h.out.Calls, c)
	h.out.CallDeltas = append(h.out.CallDeltas,
		ToolCallDelta{Index: c.Index, ID: c.ID, Name: c.Name},
		ToolCallDelta{Index: c.Index, ArgumentsFragment: c.Arguments})
}

// HarmonyOpenHeader returns the header of the message a rendered harmony
// prompt leaves open — "<|start|>assistant<|channel|>final<|message|>" when
// it ends inside a final message's body (a template that opens the answer,
// a structured answer, a prefill) — or "" when it ends between messages.
// Fed to a fresh harmony parser it makes the output that message's body;
// the body text already in the prompt is not part of it.
func HarmonyOpenHeader(prompt string) string {
	i := strings.LastIndex(prompt, hStart)
	if i < 0 {
		return ""
	}
	j := strings.Index(prompt[i:], hMessage)
	if j < 0 {
		return ""
	}
	rest := prompt[i+j+len(hMessage):]
	for _, end := range []string{hEnd, hCall, hReturn} {
		if strings.Contains(rest, end) {
			return ""
		}
	}
	return prompt[i : i+j+len(hMessage)]
}
