package parser

import (
	"bytes"
	"strings"
)

// GLM-4.5/4.6 write a call as the function's name on the <tool_call> line,
// then one key/value pair per argument:
//
//	<tool_call>get_weather
//	<arg_key>city</arg_key>
//	<arg_value>Paris</arg_value>
//	</tool_call>
//
// A value is raw text for a string and JSON (tojson) for anything else, as
// the template writes them back; it is kept exactly (no trimming).
const (
	glmKeyOpen    = "<arg_key>"
	glmKeyClose   = "</arg_key>"
	glmValueOpen  = "<arg_value>"
	glmValueClose = "</arg_value>"
)

// Phi-4-mini writes its calls as a JSON list between its tool-call tokens:
// <|tool_call|>[{"name": …, "arguments": {…}}, …]<|/tool_call|>.
const (
	phi4CallOpen  = "<|tool_call|>"
	phi4CallClose = "<|/tool_call|>"
)

func newGLM45(o Options) Parser {
	return newMachine(family{think: true, trim: true, open: []string{toolCallOpen},
		end: closeTag(toolCallClose), parse: glmCalls(o.ParamTypes), partial: partialGLM(o.ParamTypes)}, o)
}

func newPhi4Mini(o Options) Parser {
	return newMachine(family{trim: true, open: []string{phi4CallOpen},
		end: jsonCloseTag(phi4CallClose), parse: parsePhi4}, o)
}

// glmArg is one parsed <arg_key>/<arg_value> pair and the bytes it took.
type glmArg struct {
	key, value string
	n          int
}

// nextGLMArg reads the pair at the start of b (after whitespace); ok is
// false while no complete, well-formed pair is there.
func nextGLMArg(b []byte) (glmArg, bool) {
	t := bytes.TrimLeft(b, " \t\r\n")
	if !bytes.HasPrefix(t, []byte(glmKeyOpen)) {
		return glmArg{}, false
	}
	rest := t[len(glmKeyOpen):]
	kc := bytes.Index(rest, []byte(glmKeyClose))
	if kc < 0 {
		return glmArg{}, false
	}
	key := strings.TrimSpace(string(rest[:kc]))
	v := bytes.TrimLeft(rest[kc+len(glmKeyClose):], " \t\r\n")
	if !bytes.HasPrefix(v, []byte(glmValueOpen)) || key == "" {
		return glmArg{}, false
	}
	v = v[len(glmValueOpen):]
	vc := bytes.Index(v, []byte(glmValueClose))
	if vc < 0 {
		return glmArg{}, false
	}
	return glmArg{key: key, value: string(v[:vc]), n: len(b) - len(v) + vc + len(glmValueClose)}, true
}

// glmName splits a call body into the function name (its first line, or
// what precedes the first <arg_key>) and the rest. ok is false while
// neither a newline nor <arg_key> has come.
func glmName(body []byte) (string, int, bool) {
	t := bytes.TrimLeft(body, " \t\r\n")
	end := len(t)
	found := false
	if i := bytes.IndexByte(t, '\n'); i >= 0 {
		end, found = i, true
	}
	if i := bytes.Index(t, []byte(glmKeyOpen)); i >= 0 && i < end {
		end, found = i, true
	}
	return strings.TrimSpace(string(t[:end])), len(body) - len(t) + end, found
}

func glmCalls(types map[string]map[string]string) func(string, string, bool) ([]rawCall, bool) {
	return func(_, body string, _ bool) ([]rawCall, bool) {
		b := []byte(body)
		name, at, found := glmName(b)
		if !found {
			name, at = strings.TrimSpace(body), len(body)
		}
		if name == "" || strings.ContainsAny(name, "<>{}") {
			return nil, false
		}
		var keys []string
		vals := map[string]string{}
		for {
			rest := b[at:]
			if len(bytes.TrimSpace(rest)) == 0 {
				break
			}
			a, ok := nextGLMArg(rest)
			if !ok {
				return nil, false
			}
			at += a.n
			if _, seen := vals[a.key]; !seen { // a repeated key: the first one wins
				keys = append(keys, a.key)
				vals[a.key] = xmlValue(a.value, types[name][a.key])
			}
		}
		return []rawCall{{name: name, args: objectText(keys, vals)}}, true
	}
}

// objectText writes a JSON object of already-encoded values in key order.
func objectText(keys []string, vals map[string]string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(jsonString(k))
		b.WriteByte(':')
		b.WriteString(vals[k])
	}
	b.WriteByte('}')
	return b.String()
}

// partialGLM streams a GLM call: "{" once the name's line is complete,
// then each argument when its </arg_value> arrives (a repeated key is
// skipped, as in the final parse).
func partialGLM(types map[string]map[string]string) func(string) partialFn {
	return func(string) partialFn {
		var (
			name string
			pos  int
			b    strings.Builder
			seen = map[string]bool{}
		)
		return func(body []byte) (string, string, bool) {
			if name == "" {
				n, at, found := glmName(body)
				if !found || n == "" || strings.ContainsAny(n, "<>{}") {
					return "", "", false
				}
				name, pos = n, at
				b.WriteByte('{')
			}
			for {
				a, ok := nextGLMArg(body[pos:])
				if !ok {
					break
				}
				pos += a.n
				if seen[a.key] {
					continue
				}
				if len(seen) > 0 {
					b.WriteByte(',')
				}
				seen[a.key] = true
				b.WriteString(jsonString(a.key))
				b.WriteByte(':')
				b.WriteString(xmlValue(a.value, types[name][a.key]))
			}
			return name, b.String(), true
		}
	}
}

// parsePhi4: a JSON list of {"name", "arguments"|"parameters"} objects, or
// one such object.
func parsePhi4(_, body string, _ bool) ([]rawCall, bool) { return jsonCalls(strings.TrimSpace(body)) }
