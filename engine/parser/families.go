package parser

import (
	"bytes"
	"encoding/json"
	"strings"
)

const (
	toolCallOpen  = "<tool_call>"
	toolCallClose = "</tool_call>"

	dsCallsBegin = "<｜tool▁calls▁begin｜>"
	dsCallsEnd   = "<｜tool▁calls▁end｜>"
	dsCallBegin  = "<｜tool▁call▁begin｜>"
	dsCallEnd    = "<｜tool▁call▁end｜>"
	dsSep        = "<｜tool▁sep｜>"

	mistralCalls = "[TOOL_CALLS]"
	mistralArgs  = "[ARGS]"
	mistralID    = "[CALL_ID]"
	// Magistral's and Ministral 3 Reasoning's reasoning block.
	mistralThinkOpen  = "[THINK]"
	mistralThinkClose = "[/THINK]"
)

// families builds the constructor table by family name (read-only once
// built).
func families() map[string]func(Options) Parser {
	r := map[string]func(Options) Parser{}
	hermes := func(o Options) Parser {
		return newMachine(family{think: true, trim: true, open: []string{toolCallOpen},
			end: jsonCloseTag(toolCallClose), parse: parseHermes, partial: partialJSONCall}, o)
	}
	r[Qwen3] = hermes
	r[Hermes] = hermes
	r[Qwen3Coder] = func(o Options) Parser {
		return newMachine(family{think: true, trim: true, open: []string{toolCallOpen},
			end: closeTag(toolCallClose), parse: qwenXML(o.ParamTypes), partial: partialXML(o.ParamTypes)}, o)
	}
	r[DeepSeekV3] = func(o Options) Parser {
		return newMachine(family{think: true, trim: true, open: []string{dsCallBegin},
			drop: []string{dsCallsBegin, dsCallsEnd},
			end:  closeTag(dsCallEnd), parse: parseDeepSeek}, o)
	}
	r[Llama3JSON] = func(o Options) Parser {
		return newMachine(family{trim: true, leadJSON: true, end: jsonBodyEnd, parse: parseLlama, partial: partialJSONCall,
			notCall: llamaNotCall}, o)
	}
	r[Mistral] = func(o Options) Parser {
		return newMachine(family{think: true, thinkTags: &[2]string{mistralThinkOpen, mistralThinkClose}, trim: true,
			open: []string{mistralCalls}, end: mistralEnd, parse: parseMistral}, o)
	}
	r[MistralArgs] = r[Mistral]
	r[Think] = func(o Options) Parser {
		return newMachine(family{think: true, trim: true}, o)
	}
	r[GLM45] = newGLM45
	r[Phi4Mini] = newPhi4Mini
	r[Harmony] = newHarmony
	r[Gemma4] = newGemma4
	r[Gemma4Think] = newGemma4Think
	pass := func(o Options) Parser { return newMachine(family{}, o) }
	r[None] = pass
	r[Passthrough] = pass
	return r
}

func closeTag(tag string) func(string) ender {
	return func(string) ender {
		from := 0
		return func(buf []byte) (int, int) {
			if i := bytes.Index(buf[from:], []byte(tag)); i >= 0 {
				return from + i, from + i + len(tag)
			}
			from = max(0, len(buf)-len(tag)+1)
			return -1, 0
		}
	}
}

// jsonCloseTag is closeTag for a JSON body: a tag inside one of its
// strings (an argument that mentions </tool_call>) does not end the call.
// A body that does not start as JSON ends at the first tag.
func jsonCloseTag(tag string) func(string) ender {
	return func(string) ender {
		var (
			from, kind int // kind: 0 not known yet, 1 JSON, -1 not JSON
			inStr, esc bool
		)
		return func(buf []byte) (int, int) {
			for ; from < len(buf); from++ {
				c := buf[from]
				if kind == 0 {
					switch c {
					case ' ', '\t', '\r', '\n':
						continue
					case '{', '[':
						kind = 1
					default:
						kind = -1
					}
				}
				switch {
				case inStr && esc:
					esc = false
					continue
				case inStr:
					esc, inStr = c == '\\', c != '"'
					continue
				case c == '"' && kind > 0:
					inStr = true
					continue
				}
				rest := buf[from:]
				if bytes.HasPrefix(rest, []byte(tag)) {
					return from, from + len(tag)
				}
				if len(rest) < len(tag) && bytes.HasPrefix([]byte(tag), rest) {
					return -1, 0 // maybe the tag: wait for more
				}
			}
			return -1, 0
		}
	}
}

// jsonScan incrementally finds the end of the first JSON object or array in
// a growing buffer, after leading whitespace.
type jsonScan struct {
	pos, depth int
	inStr, esc bool
}

// next resumes the scan over buf and returns the index just past the
// value, -1 if it is not complete yet, or -2 if buf does not start with an
// object or array.
func (j *jsonScan) next(buf []byte) int {
	for ; j.pos < len(buf); j.pos++ {
		c := buf[j.pos]
		if j.depth == 0 {
			switch c {
			case ' ', '\t', '\r', '\n':
				continue
			case '{', '[':
				j.depth = 1
				continue
			default:
				return -2
			}
		}
		switch {
		case j.inStr:
			if j.esc {
				j.esc = false
			} else if c == '\\' {
				j.esc = true
			} else if c == '"' {
				j.inStr = false
			}
		case c == '"':
			j.inStr = true
		case c == '{' || c == '[':
			j.depth++
		case c == '}' || c == ']':
			j.depth--
			if j.depth == 0 {
				j.pos++
				return j.pos
			}
		}
	}
	return -1
}

// jsonBodyEnd ends a llama3_json call at the end of its JSON object (a
// body that is not JSON, like <|python_tag|>name.call(…), runs to Finish).
func jsonBodyEnd(string) ender {
	var j jsonScan
	return func(buf []byte) (int, int) {
		if n := j.next(buf); n >= 0 {
			return n, n
		}
		return -1, 0
	}
}

// mistralEnd ends a [TOOL_CALLS] body at the end of its JSON array/object,
// or, in the name[ARGS]{…} form, at the end of the arguments object.
func mistralEnd(string) ender {
	var j jsonScan
	off, from := -1, 0
	return func(buf []byte) (int, int) {
		if off < 0 {
			t := bytes.TrimLeft(buf, " \t\r\n")
			switch {
			case len(t) == 0:
				return -1, 0
			case t[0] == '[' || t[0] == '{':
				off = 0
			default:
				i := bytes.Index(buf[from:], []byte(mistralArgs))
				if i < 0 {
					from = max(0, len(buf)-len(mistralArgs)+1)
					return -1, 0
				}
				off = from + i + len(mistralArgs)
			}
		}
		if n := j.next(buf[off:]); n >= 0 {
			return off + n, off + n
		}
		return -1, 0
	}
}

// compactJSON compacts JSON text, keeping key order and raw non-ASCII.
func compactJSON(s string) (string, bool) {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		return "", false
	}
	return b.String(), true
}

// argsObject normalises an arguments value: an object (compacted), a JSON
// string holding an object, or absent/null ("{}").
func argsObject(raw json.RawMessage) (string, bool) {
	t := strings.TrimSpace(string(raw))
	switch {
	case t == "" || t == "null":
		return "{}", true
	case t[0] == '{':
		return compactJSON(t)
	case t[0] == '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		s = strings.TrimSpace(s)
		if s == "" {
			return "{}", true
		}
		if strings.HasPrefix(s, "{") && json.Valid([]byte(s)) {
			return compactJSON(s)
		}
	}
	return "", false
}

type jsonCall struct {
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
	Parameters json.RawMessage `json:"parameters"`
}

// decodeCall decodes one {"name", "arguments"|"parameters"} object that must
// make up all of s.
func decodeCall(s string) (rawCall, bool) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "{") || !json.Valid([]byte(s)) {
		return rawCall{}, false
	}
	var c jsonCall
	if json.Unmarshal([]byte(s), &c) != nil || strings.TrimSpace(c.Name) == "" {
		return rawCall{}, false
	}
	a := c.Arguments
	if len(a) == 0 {
		a = c.Parameters
	}
	args, ok := argsObject(a)
	if !ok {
		return rawCall{}, false
	}
	return rawCall{name: strings.TrimSpace(c.Name), args: args}, true
}

func one(c rawCall, ok bool) ([]rawCall, bool) {
	if !ok {
		return nil, false
	}
	return []rawCall{c}, true
}

// parseHermes: <tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>.
// Several objects in one block (Qwen2.5 sometimes does this) are several
// calls.
func parseHermes(_, body string, _ bool) ([]rawCall, bool) {
	if c, ok := decodeCall(body); ok {
		return []rawCall{c}, true
	}
	var out []rawCall
	for rest := body; strings.TrimSpace(rest) != ""; {
		var j jsonScan
		n := j.next([]byte(rest))
		if n < 0 {
			return nil, false
		}
		c, ok := decodeCall(rest[:n])
		if !ok {
			return nil, false
		}
		out = append(out, c)
		rest = rest[n:]
	}
	return out, len(out) > 0
}

// llamaNotCall: a body is meant as a call only if it is an object whose
// first key is "name"; anything else (a JSON answer, a builtin
// <|python_tag|>tool.call(…)) is content.
func llamaNotCall(body string) bool {
	t := strings.TrimLeft(body, " \t\r\n")
	if !strings.HasPrefix(t, "{") {
		return true
	}
	return !strings.HasPrefix(strings.TrimLeft(t[1:], " \t\r\n"), `"name"`)
}

// parseLlama: a bare {"name": …, "parameters": {…}} object.
func parseLlama(_, body string, _ bool) ([]rawCall, bool) { return one(decodeCall(body)) }

// parseMistral: [{"name": …, "arguments": {…}}, …], a single object, or
// name[ARGS]{…} (also name[CALL_ID]id[ARGS]{…}).
func parseMistral(_, body string, _ bool) ([]rawCall, bool) {
	t := strings.TrimSpace(body)
	if t == "" {
		return nil, false
	}
	if t[0] == '{' || t[0] == '[' {
		return jsonCalls(t)
	}
	i := strings.Index(t, mistralArgs)
	if i < 0 {
		return nil, false
	}
	name := t[:i]
	if j := strings.Index(name, mistralID); j >= 0 {
		name = name[:j]
	}
	name = strings.TrimSpace(name)
	args, ok := argsObject(json.RawMessage(t[i+len(mistralArgs):]))
	if name == "" || !ok {
		return nil, false
	}
	return []rawCall{{name: name, args: args}}, true
}

// jsonCalls decodes t, a JSON list of {"name", "arguments"|"parameters"}
// objects or one such object, into calls.
func jsonCalls(t string) ([]rawCall, bool) {
	if strings.HasPrefix(t, "{") {
		return one(decodeCall(t))
	}
	var list []json.RawMessage
	if !strings.HasPrefix(t, "[") || json.Unmarshal([]byte(t), &list) != nil || len(list) == 0 {
		return nil, false
	}
	out := make([]rawCall, 0, len(list))
	for _, r := range list {
		c, ok := decodeCall(string(r))
		if !ok {
			return nil, false
		}
		out = append(out, c)
	}
	return out, true
}

// parseDeepSeek: function<｜tool▁sep｜>NAME\n```json\nARGS\n``` (V3), or
// NAME<｜tool▁sep｜>ARGS (V3.1).
func parseDeepSeek(_, body string, _ bool) ([]rawCall, bool) {
	i := strings.Index(body, dsSep)
	if i < 0 {
		return nil, false
	}
	head, rest := strings.TrimSpace(body[:i]), body[i+len(dsSep):]
	var name, args string
	if head == "function" || head == "" {
		nl := strings.IndexByte(rest, '\n')
		if nl < 0 {
			return nil, false
		}
		name = strings.TrimSpace(rest[:nl])
		a := strings.TrimSpace(rest[nl+1:])
		if strings.HasPrefix(a, "```") {
			a = strings.TrimPrefix(a, "```")
			a = strings.TrimPrefix(a, "json")
			a = strings.TrimSuffix(strings.TrimSpace(a), "```")
		}
		args = a
	} else {
		name, args = head, rest
	}
	a, ok := argsObject(json.RawMessage(strings.TrimSpace(args)))
	if name == "" || !ok {
		return nil, false
	}
	return []rawCall{{name: name, args: a}}, true
}

// qwenXML parses <function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>…
// </function>. When types (tool → parameter → JSON Schema type) names the
// parameter's type "string" the value stays a string; otherwise a value
// becomes JSON (number, bool, null, object, array) when it parses as such,
// a JSON string otherwise. Parameters keep their order; a repeated key keeps
// its first value.
func qwenXML(types map[string]map[string]string) func(string, string, bool) ([]rawCall, bool) {
	return func(_, body string, _ bool) ([]rawCall, bool) { return parseQwenXML(body, types) }
}

func parseQwenXML(body string, types map[string]map[string]string) ([]rawCall, bool) {
	const fOpen, pOpen, pClose, fClose = "<function=", "<parameter=", "</parameter>", "</function>"
	t := strings.TrimSpace(body)
	if !strings.HasPrefix(t, fOpen) {
		return nil, false
	}
	t = t[len(fOpen):]
	gt := strings.IndexByte(t, '>')
	if gt < 0 {
		return nil, false
	}
	name := strings.TrimSpace(t[:gt])
	t = t[gt+1:]
	fc := strings.LastIndex(t, fClose)
	if fc < 0 || strings.TrimSpace(t[fc+len(fClose):]) != "" || name == "" {
		return nil, false
	}
	t = t[:fc]
	var keys []string
	vals := map[string]string{}
	for {
		t = strings.TrimLeft(t, " \t\r\n")
		if t == "" {
			break
		}
		if !strings.HasPrefix(t, pOpen) {
			return nil, false
		}
		t = t[len(pOpen):]
		gt := strings.IndexByte(t, '>')
		if gt < 0 {
			return nil, false
		}
		key := strings.TrimSpace(t[:gt])
		t = t[gt+1:]
		end := strings.Index(t, pClose)
		if key == "" || end < 0 {
			return nil, false
		}
		v := t[:end]
		t = t[end+len(pClose):]
		v = strings.TrimPrefix(v, "\n")
		v = strings.TrimSuffix(v, "\n")
		if _, ok := vals[key]; !ok { // a repeated key: the first one wins
			keys = append(keys, key)
			vals[key] = xmlValue(v, types[name][key])
		}
	}
	return []rawCall{{name: name, args: objectText(keys, vals)}}, true
}

// xmlValue is a parameter's value as JSON. A parameter whose schema names
// a type other than string also reads Python's literals, as Qwen3.5's
// template writes them back (str() of a bool or None): True, False
// (booleans) and None.
func xmlValue(v, typ string) string {
	t := strings.TrimSpace(v)
	if typ != "" && typ != "string" {
		switch {
		case t == "None":
			return "null"
		case typ == "boolean" && (t == "True" || t == "False"):
			return strings.ToLower(t)
		}
	}
	if typ != "string" && t != "" && t[0] != '"' && json.Valid([]byte(t)) {
		if c, ok := compactJSON(t); ok {
			return c
		}
	}
	return jsonString(v)
}

// jsonString encodes s as a JSON string without HTML escaping.
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

// partialJSONCall streams an incomplete {"name": "N", "arguments": {…
// body (or "parameters"; name first, without escapes): the arguments are
// compacted on the fly, resuming where the previous call stopped.
func partialJSONCall(string) partialFn {
	var (
		name       string
		found      bool
		pos, depth int
		inStr, esc bool
		out        strings.Builder
	)
	return func(body []byte) (string, string, bool) {
		if !found {
			n, start, ok := jsonCallHead(body)
			if !ok {
				return "", "", false
			}
			name, found, pos = n, true, start
		}
		for ; pos < len(body) && (depth > 0 || out.Len() == 0); pos++ {
			c := body[pos]
			switch {
			case inStr:
				if esc {
					esc = false
				} else if c == '\\' {
					esc = true
				} else if c == '"' {
					inStr = false
				}
			case c == ' ' || c == '\t' || c == '\r' || c == '\n':
				continue
			case c == '"':
				inStr = true
			case c == '{' || c == '[':
				depth++
			case c == '}' || c == ']':
				depth--
			}
			out.WriteByte(c)
		}
		a := out.String()
		if depth > 0 {
			a = a[:len(a)-incompleteTail(a)]
		}
		return name, a, true
	}
}

// jsonCallHead matches `{"name": "N", "arguments": ` (or "parameters") at
// the start of body and returns N and the offset of the arguments object.
func jsonCallHead(body []byte) (string, int, bool) {
	p := body
	ws := func() { p = bytes.TrimLeft(p, " \t\r\n") }
	lit := func(l string) bool {
		ws()
		if !bytes.HasPrefix(p, []byte(l)) {
			return false
		}
		p = p[len(l):]
		return true
	}
	if !lit("{") || !lit(`"name"`) || !lit(":") || !lit(`"`) {
		return "", 0, false
	}
	q := bytes.IndexAny(p, `"\\`)
	if q < 0 || p[q] != '"' {
		return "", 0, false
	}
	name := string(p[:q])
	p = p[q+1:]
	if !lit(",") || !(lit(`"arguments"`) || lit(`"parameters"`)) || !lit(":") {
		return "", 0, false
	}
	ws()
	if len(p) == 0 || p[0] != '{' || strings.TrimSpace(name) != name || name == "" {
		return "", 0, false
	}
	return name, len(body) - len(p), true
}

// partialXML streams a qwen3_coder call: "{" once the function name is
// known, then each parameter when its </parameter> arrives (a repeated key
// is skipped, as in the final parse).
func partialXML(types map[string]map[string]string) func(string) partialFn {
	return func(string) partialFn {
		const fOpen, pOpen, pClose = "<function=", "<parameter=", "</parameter>"
		var (
			name string
			pos  int // offset in body after the last complete parameter
			b    strings.Builder
			seen = map[string]bool{}
		)
		return func(body []byte) (string, string, bool) {
			if name == "" {
				t := bytes.TrimLeft(body, " \t\r\n")
				if !bytes.HasPrefix(t, []byte(fOpen)) {
					return "", "", false
				}
				t = t[len(fOpen):]
				gt := bytes.IndexByte(t, '>')
				if gt < 0 || strings.TrimSpace(string(t[:gt])) == "" {
					return "", "", false
				}
				name = strings.TrimSpace(string(t[:gt]))
				pos = len(body) - len(t) + gt + 1
				b.WriteByte('{')
			}
			for {
				t := bytes.TrimLeft(body[pos:], " \t\r\n")
				if !bytes.HasPrefix(t, []byte(pOpen)) {
					break
				}
				t = t[len(pOpen):]
				gt := bytes.IndexByte(t, '>')
				if gt < 0 {
					break
				}
				key := strings.TrimSpace(string(t[:gt]))
				t = t[gt+1:]
				end := bytes.Index(t, []byte(pClose))
				if key == "" || end < 0 {
					break
				}
				v := strings.TrimSuffix(strings.TrimPrefix(string(t[:end]), "\n"), "\n")
				pos = len(body) - len(t) + end + len(pClose)
				if seen[key] {
					continue
				}
				if len(seen) > 0 {
					b.WriteByte(',')
				}
				seen[key] = true
				b.WriteString(jsonString(key))
				b.WriteByte(':')
				b.WriteString(xmlValue(v, types[name][key]))
			}
			return name, b.String(), true
		}
	}
}
