package parser

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Gemma 4's output format, as its chat template writes it back: reasoning
// in a thought channel, <|channel>thought\n…<channel|>; calls as
// <|tool_call>call:NAME{key:VALUE,…}<tool_call|>, where keys are bare,
// strings are delimited by the <|"|> token, and numbers, true, false and
// null are as in JSON (arrays and nested objects too, whose keys may be
// bare or <|"|>-quoted). The model ends a turn of calls with
// <|tool_response>, which is dropped.
const (
	gemmaChannel      = "<|channel>"
	gemmaThoughtOpen  = gemmaChannel + "thought"
	gemmaThoughtClose = "<channel|>"
	gemmaCallOpen     = "<|tool_call>"
	gemmaCallClose    = "<tool_call|>"
	gemmaQuote        = `<|"|>`
	gemmaResponse     = "<|tool_response>"
)

var gemmaThinkTags = [2]string{gemmaThoughtOpen, gemmaThoughtClose}

func newGemma4(o Options) Parser {
	return newMachine(family{think: true, thinkTags: &gemmaThinkTags, trim: true,
		open: []string{gemmaCallOpen}, drop: []string{gemmaResponse},
		end: gemmaCloseTag, parse: parseGemma4}, o)
}

// newGemma4Think splits off the thought channel only (tool_choice none:
// call-like text stays content).
func newGemma4Think(o Options) Parser {
	return newMachine(family{think: true, thinkTags: &gemmaThinkTags, trim: true}, o)
}

// gemmaCloseTag ends a call body at <tool_call|> outside a <|"|> string
// (an argument that mentions the tag does not end the call).
func gemmaCloseTag(string) ender {
	from, inStr := 0, false
	return func(buf []byte) (int, int) {
		for from < len(buf) {
			rest := buf[from:]
			if bytes.HasPrefix(rest, []byte(gemmaQuote)) {
				inStr = !inStr
				from += len(gemmaQuote)
				continue
			}
			if !inStr && bytes.HasPrefix(rest, []byte(gemmaCallClose)) {
				return from, from + len(gemmaCallClose)
			}
			if rest[0] == '<' && (bytes.HasPrefix([]byte(gemmaQuote), rest) || !inStr && bytes.HasPrefix([]byte(gemmaCallClose), rest)) {
				return -1, 0 // maybe a marker: wait for more
			}
			from++
		}
		return -1, 0
	}
}

// parseGemma4 parses one or more call:NAME{…} in a call body.
func parseGemma4(_, body string, _ bool) ([]rawCall, bool) {
	var out []rawCall
	rest := strings.TrimSpace(body)
	for rest != "" {
		if !strings.HasPrefix(rest, "call:") {
			return nil, false
		}
		rest = rest[len("call:"):]
		brace := strings.IndexByte(rest, '{')
		if brace < 0 {
			return nil, false
		}
		name := strings.TrimSpace(rest[:brace])
		if name == "" || strings.ContainsAny(name, " \t\r\n<>,:\"") {
			return nil, false
		}
		g := gemmaValue{s: rest[brace:]}
		var b strings.Builder
		if !g.object(&b) {
			return nil, false
		}
		out = append(out, rawCall{name: name, args: b.String()})
		rest = strings.TrimSpace(g.s)
	}
	return out, len(out) > 0
}

// gemmaValue reads Gemma 4's argument syntax from s, writing it as compact
// JSON (key order kept).
type gemmaValue struct{ s string }

func (g *gemmaValue) ws() { g.s = strings.TrimLeft(g.s, " \t\r\n") }

func (g *gemmaValue) eat(c byte) bool {
	g.ws()
	if g.s == "" || g.s[0] != c {
		return false
	}
	g.s = g.s[1:]
	return true
}

// str reads a <|"|>…<|"|> string.
func (g *gemmaValue) str(b *strings.Builder) bool {
	g.ws()
	if !strings.HasPrefix(g.s, gemmaQuote) {
		return false
	}
	t := g.s[len(gemmaQuote):]
	end := strings.Index(t, gemmaQuote)
	if end < 0 {
		return false
	}
	b.WriteString(jsonString(t[:end]))
	g.s = t[end+len(gemmaQuote):]
	return true
}

// object reads {key:value,…}; a key is bare (up to its colon) or quoted.
func (g *gemmaValue) object(b *strings.Builder) bool {
	if !g.eat('{') {
		return false
	}
	b.WriteByte('{')
	if g.eat('}') {
		b.WriteByte('}')
		return true
	}
	for first := true; ; first = false {
		if !first {
			b.WriteByte(',')
		}
		g.ws()
		if strings.HasPrefix(g.s, gemmaQuote) {
			if !g.str(b) {
				return false
			}
		} else {
			colon := strings.IndexByte(g.s, ':')
			if colon < 0 {
				return false
			}
			key := strings.TrimSpace(g.s[:colon])
			if key == "" || strings.ContainsAny(key, "{}[],\"") || strings.Contains(key, "<|") {
				return false
			}
			b.WriteString(jsonString(key))
			g.s = g.s[colon:]
		}
		if !g.eat(':') {
			return false
		}
		b.WriteByte(':')
		if !g.value(b) {
			return false
		}
		if g.eat('}') {
			b.WriteByte('}')
			return true
		}
		if !g.eat(',') {
			return false
		}
	}
}

func (g *gemmaValue) array(b *strings.Builder) bool {
	if !g.eat('[') {
		return false
	}
	b.WriteByte('[')
	if g.eat(']') {
		b.WriteByte(']')
		return true
	}
	for first := true; ; first = false {
		if !first {
			b.WriteByte(',')
		}
		if !g.value(b) {
			return false
		}
		if g.eat(']') {
			b.WriteByte(']')
			return true
		}
		if !g.eat(',') {
			return false
		}
	}
}

// value reads a string, object, array, or a JSON number, true, false or
// null (also Python's None, which the template writes for a null).
func (g *gemmaValue) value(b *strings.Builder) bool {
	g.ws()
	switch {
	case g.s == "":
		return false
	case strings.HasPrefix(g.s, gemmaQuote):
		return g.str(b)
	case g.s[0] == '{':
		return g.object(b)
	case g.s[0] == '[':
		return g.array(b)
	}
	n := strings.IndexAny(g.s, ",}] \t\r\n")
	if n < 0 {
		n = len(g.s)
	}
	word := g.s[:n]
	switch word {
	case "true", "false", "null":
		b.WriteString(word)
	case "None":
		b.WriteString("null")
	default:
		var f json.Number
		if word == "" || word[0] == '"' || json.Unmarshal([]byte(word), &f) != nil {
			return false
		}
		b.WriteString(word)
	}
	g.s = g.s[n:]
	return true
}
