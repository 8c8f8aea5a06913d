package runner

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"fusion/engine"
	"fusion/engine/prompt"
)

// TestConstrainedOutput: with random weights — the worst possible model —
// sampled answers under a response format are JSON that fits the schema.
func TestConstrainedOutput(t *testing.T) {
	r := newDemoRunner(t, Config{})
	schema := `{"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":3},"ok":{"type":"boolean"}},"required":["name","age","ok"],"additionalProperties":false}`
	tests := []struct {
		name   string
		format *engine.ResponseFormat
		check  func(map[string]any) bool
	}{
		{"json_object", &engine.ResponseFormat{}, func(map[string]any) bool { return true }},
		{"json_schema", &engine.ResponseFormat{Schema: []byte(schema)}, func(v map[string]any) bool {
			name, ok1 := v["name"].(string)
			age, ok2 := v["age"].(float64)
			_, ok3 := v["ok"].(bool)
			for k := range v {
				if k != "name" && k != "age" && k != "tags" && k != "ok" {
					return false
				}
			}
			return ok1 && ok2 && ok3 && len([]rune(name)) <= 12 && age == float64(int64(age))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			valid := 0
			const runs = 10
			for i := range runs {
				// A small max_tokens: the grammar closes the document in time.
				req := chat("demo-gguf", "Give me JSON", 40+5*i)
				seed := int64(i)
				req.Sampling.Temperature, req.Sampling.Seed = 1, &seed
				req.ResponseFormat = tc.format
				ch, err := r.Generate(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				text, final, _ := collect(t, ch)
				var v map[string]any
				if err := json.Unmarshal([]byte(text), &v); err != nil || !tc.check(v) {
					t.Errorf("run %d (%s): %q is not a valid answer: %v", i, final.FinishReason, text, err)
					continue
				}
				if final.FinishReason != engine.FinishStop {
					t.Errorf("run %d: finish %q after a complete document", i, final.FinishReason)
				}
				valid++
			}
			t.Logf("%s: %d/%d complete and valid", tc.name, valid, runs)
			if valid == 0 {
				t.Errorf("%s: no complete document in %d runs", tc.name, runs)
			}
		})
	}

	bad := chat("demo", "x", 10)
	bad.ResponseFormat = &engine.ResponseFormat{Schema: []byte(`{"type":"number","minimum":0.5}`)}
	var ire *prompt.InvalidRequestError
	if _, err := r.Generate(context.Background(), bad); !errors.As(err, &ire) || !strings.Contains(err.Error(), "minimum") {
		t.Errorf("unenforceable schema: %v, want a 400 naming minimum", err)
	}
}
