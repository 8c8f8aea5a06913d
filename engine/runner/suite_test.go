package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"fusion/engine"
	"fusion/engine/backend/mlx"
	"fusion/engine/chattemplate"
	"fusion/engine/demo"
	"fusion/engine/demo/demotest"
	"fusion/engine/grammar"
	"fusion/internal/testenv"
)

// suiteSchemas cover what response_format and tool parameters may use:
// objects with required and optional properties, additionalProperties,
// arrays with bounds, enums, const, every scalar type, anyOf/oneOf, $ref
// and $defs with recursion, deep nesting, patterns and formats.
var suiteSchemas = []string{
	`{"type":"object"}`,
	`{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false}`,
	`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"number"},"c":{"type":"boolean"},"d":{"type":"null"}},"additionalProperties":false}`,
	`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},"required":["c"]}`,
	`{"type":"object","properties":{"x":{"type":"integer"}},"required":["x","extra"]}`,
	`{"type":"object","additionalProperties":{"type":"integer"}}`,
	`{"type":"object","additionalProperties":false}`,
	`{"type":"string"}`,
	`{"type":"string","minLength":3,"maxLength":5}`,
	`{"type":"number"}`,
	`{"type":"integer"}`,
	`{"type":"boolean"}`,
	`{"type":"null"}`,
	`{"type":["integer","string","null"]}`,
	`{"enum":["red","green","blue",null,1,2.5,[1,"a"],{"k":{"n":true}}]}`,
	`{"const":"fixed \"quoted\" é"}`,
	`{"type":"array","items":{"type":"integer"}}`,
	`{"type":"array","items":{"type":"string","maxLength":2},"minItems":2,"maxItems":4}`,
	`{"type":"array","items":{"type":"array","items":{"type":"boolean"},"maxItems":2},"minItems":1}`,
	`{"anyOf":[{"type":"string","maxLength":3},{"type":"integer"},{"type":"object","properties":{"t":{"const":"x"}},"required":["t"],"additionalProperties":false}]}`,
	`{"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"v":{"type":"string"}},"required":["kind","v"],"additionalProperties":false},{"type":"object","properties":{"kind":{"const":"b"},"n":{"type":"number"}},"required":["kind","n"],"additionalProperties":false}]}`,
	`{"type":"object","properties":{"l1":{"type":"object","properties":{"l2":{"type":"object","properties":{"l3":{"type":"object","properties":{"l4":{"type":"array","items":{"type":"object","properties":{"l5":{"type":"array","items":{"type":"string"}}},"required":["l5"]}}},"required":["l4"]}},"required":["l3"]}},"required":["l2"]}},"required":["l1"]}`,
	`{"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{"value":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["value","children"],"additionalProperties":false}}}`,
	`{"definitions":{"list":{"anyOf":[{"type":"null"},{"type":"object","properties":{"head":{"type":"string","maxLength":4},"tail":{"$ref":"#/definitions/list"}},"required":["head","tail"],"additionalProperties":false}]}},"$ref":"#/definitions/list"}`,
	`{"type":"array","items":{"anyOf":[{"type":"integer"},{"$ref":"#"}]},"maxItems":3}`,
	`{"$defs":{"expr":{"anyOf":[{"type":"number"},{"type":"object","properties":{"op":{"enum":["+","-","*"]},"args":{"type":"array","items":{"$ref":"#/$defs/expr"},"minItems":2,"maxItems":2}},"required":["op","args"],"additionalProperties":false}]}},"$ref":"#/$defs/expr"}`,
	`{"type":"object","properties":{"id":{"type":"string","minLength":1,"maxLength":8},"tags":{"type":"array","items":{"type":"string","enum":["a","b"]},"maxItems":3},"meta":{"type":"object"},"score":{"type":["number","null"]},"ok":{"type":"boolean"}},"required":["id","ok"],"additionalProperties":false}`,
	`{"type":"object","properties":{"name":{"type":"string","description":"the name","title":"Name","default":"x"},"items":{"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},"name":{"type":"string"}},"required":["id"]}}},"required":["items"],"$schema":"https://json-schema.org/draft/2020-12/schema"}`,
	`{"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{2,3}-[0-9]+(\\.[a-z]+)?$"},"free":{"type":"string","pattern":"a|é"},"short":{"type":"string","pattern":"^.+$","maxLength":3}},"required":["code","free","short"],"additionalProperties":false}`,
	`{"type":"object","properties":{"date":{"type":"string","format":"date"},"when":{"type":"string","format":"date-time"},"at":{"type":"string","format":"time"},"id":{"type":"string","format":"uuid"},"ip":{"type":"string","format":"ipv4"},"mail":{"type":"string","format":"email"}},"required":["date","when","at","id","ip","mail"],"additionalProperties":false}`,
	`{"type":"object","properties":{"lat":{"type":"number","minimum":-90,"maximum":90},"n":{"type":"integer","exclusiveMinimum":0,"maximum":500},"pair":{"type":"array","prefixItems":[{"type":"string","maxLength":4},{"type":"boolean"}],"items":false,"minItems":2}},"required":["lat","n","pair"],"additionalProperties":false}`,
	`{"allOf":[{"$ref":"#/$defs/base"},{"type":"object","properties":{"b":{"type":"string","maxLength":3},"a":{"minimum":0}},"required":["b"]}],"$defs":{"base":{"type":"object","properties":{"a":{"type":"integer","maximum":50}},"required":["a"]}}}`,
	`{"type":"object","properties":{"user":{"$ref":"#/$defs/user"},"friends":{"type":"array","items":{"$ref":"#/$defs/user"},"maxItems":2}},"required":["user","friends"],"$defs":{"user":{"type":"object","properties":{"name":{"type":"string","maxLength":10},"role":{"enum":["admin","user"]}},"required":["name","role"],"additionalProperties":false}}}`,
}

// newSuiteRunner serves a random-weight Qwen3 with the real Qwen3
// tokenizer (151,936 tokens), so masks run over a real vocabulary.
func newSuiteRunner(t *testing.T) *Runner { return newSuiteRunnerWith(t, nil) }

// newSuiteRunnerWith is newSuiteRunner with models' settings; it writes a
// second random Qwen3 of the same tokenizer, qwen3-draft, to draft with.
func newSuiteRunnerWith(t *testing.T, models map[string]ModelSettings) *Runner {
	t.Helper()
	vocab := testenv.TokenizerDir(t, "qwen3")
	dir := t.TempDir()
	for name, seed := range map[string]uint64{"qwen3-random": 11, "qwen3-draft": 12} {
		if name == "qwen3-draft" && models == nil {
			continue
		}
		demotest.Create(t, filepath.Join(dir, name), demo.Options{Arch: "qwen3", Seed: seed, VocabFrom: vocab, Layers: 1, Hidden: 32, Heads: 2, KVHeads: 1, Intermediate: 64, DType: "bf16"})
	}
	backend := suiteBackend(t)
	r, err := New(Config{ModelsDir: dir, Backend: backend, Models: models})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if st := r.BackendStatus(); backend == BackendMLX && st.Name != BackendMLX {
		t.Fatalf("the suite asked for MLX runs on %s: %s", st.Name, st.Reason)
	}
	return r
}

func compileValidator(t *testing.T, src string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(src)))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func validates(s *jsonschema.Schema, doc string) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(doc)))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}

// suiteRequest is generation n of the suite: seeds, temperatures and
// max_tokens (from just above the schema's shortest document) vary so the
// random model explores.
func suiteRequest(n, shortest int) *engine.Request {
	req := chat("qwen3-random", fmt.Sprintf("Answer %d in JSON.", n), shortest+2+(n*37)%32)
	seed := int64(n)
	req.Sampling.Seed = &seed
	req.Sampling.Temperature = []float64{0.7, 1, 1.3, 2}[n%4]
	return req
}

var suiteTokens, suitePrompt int

func drain(ch <-chan engine.Event) (text string, calls []engine.ToolCall, final engine.Event) {
	defer func() { suiteTokens += final.Usage.CompletionTokens; suitePrompt += final.Usage.PromptTokens }()
	for ev := range ch {
		text += ev.Text
		calls = append(calls, ev.ToolCalls...)
		final = ev
	}
	return text, calls, final
}

// TestSchemaSuite (issue #5): the worst possible model, 200 generations
// over the schema suite through the real runner — every answer parses and
// validates with a real JSON Schema validator; then 200 forced tool calls
// whose arguments validate against the tool's parameters. The counts are
// printed: go test -v -run TestSchemaSuite ./engine/runner/ (without
// -race for the full 200).
func TestSchemaSuite(t *testing.T) {
	r := newSuiteRunner(t)
	// 200 of each. Under the race detector one per schema (every tool is
	// forced at least once too): make test runs the suite again without
	// -race at full size, whose first generations are these same
	// requests, so the race pass checks the runner's concurrency on every
	// schema and the full size runs once. MLX's CPU device is ~10x slower
	// than the CPU backend: one per schema there too.
	gens := 200
	if raceEnabled || r.BackendStatus().Name == BackendMLX {
		gens = len(suiteSchemas)
	}
	schemaSuite(t, r, gens, false)
}

// TestSchemaSuiteSpeculative: the schema suite with drafting on, by
// prompt lookup and by a draft model (another random Qwen3 of the same
// tokenizer): the grammar masks every verified position, so every answer
// still validates and every forced call is whole. Prompt lookup runs 100
// of each, the draft model one per schema (len(suiteSchemas) answers and
// as many forced calls), and so does MLX. On the CPU backend under the
// race detector both run suiteRaceGens: make test runs the suite again
// without -race at full size, starting with these same requests.
func TestSchemaSuiteSpeculative(t *testing.T) {
	for _, draft := range []string{"", "qwen3-draft"} {
		t.Run("draft="+draft, func(t *testing.T) {
			r := newSuiteRunnerWith(t, map[string]ModelSettings{"qwen3-random": {DraftModel: draft, Speculative: true}})
			onMLX := r.BackendStatus().Name == BackendMLX
			gens := 100
			switch {
			case raceEnabled && !onMLX:
				gens = suiteRaceGens
			case draft != "" || onMLX:
				// A draft model's step costs about two plain ones here.
				gens = len(suiteSchemas)
			}
			schemaSuite(t, r, gens, true)
			st := r.Stats()
			t.Logf("drafted %d, accepted %d", st.Drafted, st.Accepted)
			if st.Drafted == 0 || st.Accepted == 0 {
				t.Errorf("drafted %d, accepted %d: drafting did not run", st.Drafted, st.Accepted)
			}
		})
	}
}

// suiteRaceGens is the size of the speculative suite on the CPU backend
// under the race detector, for each way of drafting: the first 14
// schemas (objects, every scalar type, unions) and every tool forced
// once, each of the three tool choices several times.
const suiteRaceGens = 14

// schemaSuite runs gens constrained answers and gens forced tool calls.
func schemaSuite(t *testing.T, r *Runner, gens int, speculative bool) {
	ctx := context.Background()
	validators := make([]*jsonschema.Schema, len(suiteSchemas))
	for i, s := range suiteSchemas {
		validators[i] = compileValidator(t, s)
	}

	valid := 0
	for n := range gens {
		i := n % len(suiteSchemas)
		req := suiteRequest(n, shortest(t, suiteSchemas[i]))
		req.ResponseFormat = &engine.ResponseFormat{Schema: []byte(suiteSchemas[i])}
		req.Speculative = speculative
		ch, err := r.Generate(ctx, req)
		if err != nil {
			t.Fatalf("schema %d: %v", i, err)
		}
		text, _, final := drain(ch)
		if final.Err != nil {
			t.Fatalf("schema %d: %v", i, final.Err)
		}
		if err := validates(validators[i], text); err != nil {
			t.Errorf("schema %d, generation %d (%s, max_tokens %d): %q: %v", i, n, final.FinishReason, req.MaxTokens, text, err)
			continue
		}
		valid++
	}

	// Forced tool calls: the object schemas as tools' parameters.
	var tools []*chattemplate.Object
	var params []*jsonschema.Schema
	for i, s := range suiteSchemas {
		var probe struct {
			Type string `json:"type"`
		}
		if json.Unmarshal([]byte(s), &probe) == nil && probe.Type == "object" {
			tools = append(tools, functionTool(fmt.Sprintf("tool_%d", i), s))
			params = append(params, validators[i])
		}
	}
	callsValid := 0
	for n := range gens {
		k := n % len(tools)
		// Three tools per request keep the prompt short.
		req := suiteRequest(n, 0)
		req.Tools = []*chattemplate.Object{tools[k], tools[(k+1)%len(tools)], tools[(k+5)%len(tools)]}
		req.Speculative = speculative
		switch n % 3 {
		case 0:
			req.ToolChoice = engine.ToolChoice{Mode: engine.ToolRequired}
		case 1:
			req.ToolChoice = engine.ToolChoice{Mode: engine.ToolRequired, NoParallel: true}
		case 2:
			req.ToolChoice = engine.ToolChoice{Mode: engine.ToolNamed, Name: fmt.Sprintf("tool_%d", mustIndex(t, tools, k)), NoParallel: true}
		}
		// max_tokens from just above the shortest whole answer, markers
		// included.
		g, err := toolCallGrammar("qwen3", req.Tools, req.ToolChoice, 8)
		if err != nil {
			t.Fatal(err)
		}
		req.MaxTokens += g.NewMatcher().Remaining()
		ch, err := r.Generate(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		text, calls, final := drain(ch)
		ok := final.Err == nil && final.FinishReason == engine.FinishToolCalls && text == "" && len(calls) > 0
		for _, c := range calls {
			j := toolIndex(tools, c.Name)
			if j < 0 || c.Undeclared || req.ToolChoice.Mode == engine.ToolNamed && c.Name != req.ToolChoice.Name {
				ok = false
				continue
			}
			if err := validates(params[j], c.Arguments); err != nil {
				t.Errorf("generation %d: %s(%s): %v", n, c.Name, c.Arguments, err)
				ok = false
			}
		}
		if req.ToolChoice.NoParallel && len(calls) > 1 {
			ok = false
		}
		if !ok {
			t.Errorf("generation %d (%+v): finish %q err %v content %q calls %+v", n, req.ToolChoice, final.FinishReason, final.Err, text, calls)
			continue
		}
		callsValid++
	}
	t.Logf("%d prompt tokens, %d generated", suitePrompt, suiteTokens)
	t.Logf("schema suite: %d/%d answers valid over %d schemas; forced tool calls: %d/%d valid over %d tools", valid, gens, len(suiteSchemas), callsValid, gens, len(tools))
	fmt.Printf("schema suite (random-weight qwen3, real runner): %d/%d JSON answers valid over %d schemas; %d/%d forced tool calls valid over %d tools\n",
		valid, gens, len(suiteSchemas), callsValid, gens, len(tools))
}

// shortest is the length in bytes of the schema's shortest document: an
// upper bound on the tokens it needs.
func shortest(t *testing.T, schema string) int {
	g, err := grammar.Compile([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	return g.NewMatcher().Remaining()
}

func toolIndex(tools []*chattemplate.Object, name string) int {
	for i, t := range tools {
		fv, _ := t.Get("function")
		if n, _ := fv.(*chattemplate.Object).Get("name"); n == name {
			return i
		}
	}
	return -1
}

// mustIndex returns the suite index in the name of tools[k].
func mustIndex(t *testing.T, tools []*chattemplate.Object, k int) int {
	fv, _ := tools[k].Get("function")
	n, _ := fv.(*chattemplate.Object).Get("name")
	var i int
	if _, err := fmt.Sscanf(n.(string), "tool_%d", &i); err != nil {
		t.Fatal(err)
	}
	return i
}

// suiteBackend is the backend the suites run on: FUSION_TEST_BACKEND's
// (make test runs them on MLX as well), else the runner's default. On
// MLX it must be MLX indeed.
func suiteBackend(t *testing.T) string {
	b := testenv.Backend()
	if b == BackendMLX {
		testenv.NeedMLX(t, mlx.Available())
	}
	return b
}
