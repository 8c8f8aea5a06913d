package runner

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/grammar"
)

// TestGrammarCacheLRU: a grammar is built once per key, the least
// recently used goes first past the size, and a failed build is not kept.
func TestGrammarCacheLRU(t *testing.T) {
	c := newGrammarCache(2)
	builds := 0
	build := func() (*grammar.Grammar, error) { builds++; return grammar.JSONObject(), nil }
	k := func(b byte) [32]byte { return [32]byte{b} }
	for _, b := range []byte{1, 2, 1, 3, 1, 2} { // 3 evicts 2 (1 was used after it); 2 is built again
		if _, err := c.get(k(b), build); err != nil {
			t.Fatal(err)
		}
	}
	if builds != 4 || c.hits != 2 {
		t.Errorf("builds %d, hits %d; want 4, 2", builds, c.hits)
	}
	fail := errors.New("bad schema")
	for range 2 {
		if _, err := c.get(k(9), func() (*grammar.Grammar, error) { builds++; return nil, fail }); !errors.Is(err, fail) {
			t.Fatalf("failed build: %v", err)
		}
	}
	if builds != 6 {
		t.Errorf("a failed build was cached (%d builds)", builds)
	}
}

// TestGrammarKeys: the keys tell apart everything a grammar depends on.
func TestGrammarKeys(t *testing.T) {
	obj := func(s string) *chattemplate.Object {
		var o chattemplate.Object
		if err := json.Unmarshal([]byte(s), &o); err != nil {
			t.Fatal(err)
		}
		return &o
	}
	tools := []*chattemplate.Object{obj(`{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}`)}
	other := []*chattemplate.Object{obj(`{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}}`)}
	key := func(family string, tools []*chattemplate.Object, c engine.ToolChoice, maxCalls int) [32]byte {
		k, err := toolCallKey(family, tools, c, maxCalls)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	req := engine.ToolChoice{Mode: engine.ToolRequired}
	base := key("hermes", tools, req, 8)
	if key("hermes", tools, req, 8) != base {
		t.Fatal("the same tools gave two keys")
	}
	for name, k := range map[string][32]byte{
		"family":      key("mistral", tools, req, 8),
		"parameters":  key("hermes", other, req, 8),
		"named":       key("hermes", tools, engine.ToolChoice{Mode: engine.ToolNamed, Name: "f"}, 8),
		"no parallel": key("hermes", tools, engine.ToolChoice{Mode: engine.ToolRequired, NoParallel: true}, 8),
		"max calls":   key("hermes", tools, req, 4),
	} {
		if k == base {
			t.Errorf("a different %s gave the same key", name)
		}
	}
	a, b := responseFormatKey(&engine.ResponseFormat{}), responseFormatKey(&engine.ResponseFormat{Schema: []byte(`{}`)})
	if a == b || responseFormatKey(&engine.ResponseFormat{Schema: []byte(`{"type":"object"}`)}) == b {
		t.Error("response format keys collide")
	}
}

// TestGrammarCompiledOncePerSchema: requests with the same response
// schema share one compiled grammar, and their answers still fit it.
func TestGrammarCompiledOncePerSchema(t *testing.T) {
	r := newDemoRunner(t, Config{})
	schema := []byte(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}`)
	for i := range 3 {
		req := chat("demo-gguf", "Give me JSON", 30)
		req.ResponseFormat = &engine.ResponseFormat{Schema: schema}
		ch, err := r.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		text, _, _ := collect(t, ch)
		var v struct {
			N *int `json:"n"`
		}
		if err := json.Unmarshal([]byte(text), &v); err != nil || v.N == nil {
			t.Errorf("answer %d %q does not fit the schema: %v", i, text, err)
		}
	}
	if r.grammars.builds != 1 || r.grammars.hits != 2 {
		t.Errorf("builds %d, hits %d; want 1, 2", r.grammars.builds, r.grammars.hits)
	}
}
