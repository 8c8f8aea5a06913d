package anthropic_test

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"fusion/node/nodetest"
)

// baseBody is a valid request; the property test breaks it one field at a
// time.
func baseBody() map[string]any {
	return map[string]any{
		"model": "demo", "max_tokens": 2, "stream": false, "temperature": 0.5, "top_p": 0.9, "top_k": 5,
		"stop_sequences": []any{"END"}, "metadata": map[string]any{"user_id": "u"},
		"system": []any{map[string]any{"type": "text", "text": "s", "cache_control": map[string]any{"type": "ephemeral"}}},
		"messages": []any{
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "hi"}}},
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "toolu_1", "name": "t", "input": map[string]any{"a": 1}}}},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok", "is_error": false}}},
		},
		"tools":       []any{map[string]any{"name": "t", "description": "d", "input_schema": map[string]any{"type": "object"}}},
		"tool_choice": map[string]any{"type": "auto"},
		"thinking":    map[string]any{"type": "disabled"},
	}
}

// Paths to break, with the kind of their valid value; count marks the
// fields count_tokens reads.
var paths = []struct {
	path, kind string
	count      bool
}{
	{"model", "string", true}, {"max_tokens", "int", false}, {"stream", "bool", false},
	{"temperature", "number", false}, {"top_p", "number", false}, {"top_k", "int", false},
	{"stop_sequences", "array", false}, {"stop_sequences.0", "string", false},
	{"metadata", "object", false}, {"metadata.user_id", "string", false},
	{"system", "array string", true}, {"system.0", "object", true}, {"system.0.type", "string", true}, {"system.0.text", "string", true},
	{"messages", "array", true}, {"messages.0", "object", true}, {"messages.0.role", "string", true},
	{"messages.0.content", "array string", true}, {"messages.0.content.0", "object", true},
	{"messages.0.content.0.type", "string", true}, {"messages.0.content.0.text", "string", true},
	{"messages.1.content.0.id", "string", true}, {"messages.1.content.0.name", "string", true}, {"messages.1.content.0.input", "object", true},
	{"messages.2.content.0.tool_use_id", "string", true}, {"messages.2.content.0.content", "string", true}, {"messages.2.content.0.is_error", "bool", true},
	{"tools", "array", true}, {"tools.0", "object", true}, {"tools.0.name", "string", true}, {"tools.0.description", "string", true},
	{"tools.0.input_schema", "object", true},
	{"tool_choice", "object", true}, {"tool_choice.type", "string", true},
	{"thinking", "object", true}, {"thinking.type", "string", true},
}

// Values of other kinds.
var confusions = []struct {
	v     any
	kinds []string // kinds this value is valid for
}{
	{true, []string{"bool"}}, {7, []string{"int", "number"}}, {1.5, []string{"number"}}, {"x", []string{"string"}},
	{[]any{1}, []string{"array"}}, {map[string]any{"zz": 1}, []string{"object"}},
}

// set replaces the value at a dotted path.
func set(doc any, path string, v any) {
	parts := strings.Split(path, ".")
	cur := doc
	for i, p := range parts {
		last := i == len(parts)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				c[p] = v
				return
			}
			cur = c[p]
		case []any:
			k, _ := strconv.Atoi(p)
			if last {
				c[k] = v
				return
			}
			cur = c[k]
		}
	}
}

func TestMalformedInput(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{})
	checkErr := func(route, body string) {
		t.Helper()
		status, _, resp := post(t, n, route, "", body)
		var e struct {
			Type  string
			Error *struct{ Type, Message string }
		}
		if status < 400 || status >= 500 || json.Unmarshal(resp, &e) != nil || e.Type != "error" || e.Error == nil ||
			e.Error.Type == "" || e.Error.Message == "" {
			t.Errorf("%s %s\n→ %d %s", route, body, status, resp)
		}
	}
	b, _ := json.Marshal(baseBody())
	if status, _, resp := post(t, n, "/v1/messages", "", string(b)); status != 200 {
		t.Fatalf("base body: %d %s", status, resp)
	}
	routes := []string{"/v1/messages", "/v1/messages/count_tokens", "/v1/count_tokens"}
	cases := 0
	for _, route := range routes {
		for _, p := range paths {
			if route != "/v1/messages" && !p.count {
				continue
			}
			for _, c := range confusions {
				if slices.ContainsFunc(c.kinds, func(k string) bool { return slices.Contains(strings.Fields(p.kind), k) }) {
					continue // a valid value
				}
				doc := baseBody()
				set(doc, p.path, c.v)
				b, _ := json.Marshal(doc)
				checkErr(route, string(b))
				cases++
			}
		}
		for _, req := range []string{"model", "messages"} {
			doc := baseBody()
			set(doc, req, nil)
			b, _ := json.Marshal(doc)
			checkErr(route, string(b))
		}
	}
	doc := baseBody()
	delete(doc, "max_tokens")
	b, _ = json.Marshal(doc)
	checkErr("/v1/messages", string(b))

	// Malformed JSON: truncations, flipped bytes, other documents.
	r := rand.New(rand.NewPCG(1, 2))
	full, _ := json.Marshal(baseBody())
	bad := []string{"", " ", "null", "[]", `"x"`, "1", "true", "{", "}", `{"model":}`, `{"model":"demo"}{}`, `{"messages":[{]}`, "\x00\xff"}
	for i := 0; i < 60; i++ {
		bad = append(bad, string(full[:r.IntN(len(full)-1)]))
	}
	for i := 0; i < 60; i++ {
		m := []byte(string(full))
		k := r.IntN(len(m))
		m[k] = "{}[]\",:"[r.IntN(7)]
		if json.Valid(m) {
			continue
		}
		bad = append(bad, string(m))
	}
	for _, route := range routes {
		for _, body := range bad {
			checkErr(route, body)
			cases++
		}
	}
	t.Logf("%d malformed requests answered 4xx", cases)
}
