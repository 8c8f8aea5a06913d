package anthropic_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	ant "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"fusion/node"
	"fusion/node/nodetest"
)

// answerSchema is the structured-output schema of the tests: two required
// properties, nothing else.
var answerSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"answer": map[string]any{"type": "string", "maxLength": 8},
		"n":      map[string]any{"type": "integer"},
	},
	"required":             []string{"answer", "n"},
	"additionalProperties": false,
}

// checkAnswer fails unless text is one JSON object valid against
// answerSchema.
func checkAnswer(t *testing.T, text string) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil || dec.More() {
		t.Fatalf("text %q is not one JSON object: %v", text, err)
	}
	answer, ok := doc["answer"].(string)
	n, isNum := doc["n"].(json.Number)
	if len(doc) != 2 || !ok || len([]rune(answer)) > 8 || !isNum {
		t.Fatalf("text %q does not match the schema", text)
	}
	if _, err := strconv.ParseInt(n.String(), 10, 64); err != nil {
		t.Fatalf("text %q: n is not an integer", text)
	}
}

// structuredCluster starts a two-node cluster: a holds the demo model and
// the thinker, b has no models and forwards to a. It returns both once b
// forwards.
func structuredCluster(t *testing.T) (a, b *node.Node) {
	t.Helper()
	models := nodetest.Models(t)
	nodetest.AddThinker(t, models)
	nodes := nodetest.StartCluster(t,
		nodetest.Options{APIKey: testKey, ModelsDir: models},
		nodetest.Options{APIKey: testKey, ModelsDir: t.TempDir()})
	a, b = nodes[0], nodes[1]
	for _, m := range []string{nodetest.Model, nodetest.Thinker} {
		warm := `{"model":"` + m + `","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`
		if status, _, body := post(t, a, "/v1/messages", testKey, warm); status != http.StatusOK {
			t.Fatalf("warming %s on a: %d %s", m, status, body)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			status, _, body := post(t, b, "/v1/messages", testKey, warm)
			if status == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("b never forwarded %s to a: %d %s", m, status, body)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return a, b
}

// blockKinds is the content's block types, in order.
func blockKinds(m ant.Message) string {
	var kinds []string
	for _, b := range m.Content {
		kinds = append(kinds, b.Type)
	}
	return strings.Join(kinds, " ")
}

// TestGoSDKStructuredOutput: output_config.format (and the beta's
// output_format) through the official Go SDK, whole and streamed, on the
// node that holds the models and on a cluster member that forwards to it
// over gRPC. The answer's text is one JSON object valid against the
// schema, after a thinking block when thinking is enabled; a forced
// tool_choice answers with the call (the format constrains direct output
// only, as on the Messages API), strict tools accepted.
func TestGoSDKStructuredOutput(t *testing.T) {
	start := time.Now()
	a, b := structuredCluster(t)
	t.Logf("cluster up and forwarding in %v", time.Since(start))
	format := ant.OutputConfigParam{Format: ant.JSONOutputFormatParam{Schema: answerSchema}}
	weather := []ant.ToolUnionParam{{OfTool: &ant.ToolParam{Name: "get_weather", Strict: ant.Bool(true),
		InputSchema: ant.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string", "maxLength": 12}},
			Required: []string{"city"}, ExtraFields: map[string]any{"additionalProperties": false}}}}}
	tests := []struct {
		name   string
		params ant.MessageNewParams
		opts   []option.RequestOption
		kinds  string // the content's block types (a regular expression)
		stop   ant.StopReason
	}{
		// The demo model's template leaves thinking to the model unless
		// it is disabled: it may reason first.
		{"output_config.format", ant.MessageNewParams{Model: nodetest.Model, MaxTokens: 60, Messages: userMsg("Answer in JSON."),
			OutputConfig: format}, nil, "(thinking )?text", ant.StopReasonEndTurn},
		{"thinking disabled", ant.MessageNewParams{Model: nodetest.Model, MaxTokens: 60, Messages: userMsg("Answer in JSON."),
			OutputConfig: format, Thinking: ant.ThinkingConfigParamUnion{OfDisabled: &ant.ThinkingConfigDisabledParam{}}}, nil, "text", ant.StopReasonEndTurn},
		{"beta output_format", ant.MessageNewParams{Model: nodetest.Model, MaxTokens: 60, Messages: userMsg("Answer in JSON.")},
			[]option.RequestOption{option.WithJSONSet("output_format", map[string]any{"type": "json_schema", "schema": answerSchema})},
			"(thinking )?text", ant.StopReasonEndTurn},
		// The thinker reasons until its budget is spent; the JSON follows.
		{"thinking first", ant.MessageNewParams{Model: nodetest.Thinker, MaxTokens: 1100, Messages: userMsg("Think, then answer in JSON."),
			OutputConfig: format, Thinking: ant.ThinkingConfigParamUnion{OfEnabled: &ant.ThinkingConfigEnabledParam{BudgetTokens: 1024}}},
			nil, "thinking text", ant.StopReasonEndTurn},
		{"forced strict tool", ant.MessageNewParams{Model: nodetest.Model, MaxTokens: 60, Messages: userMsg("Weather in Paris?"),
			OutputConfig: format, Tools: weather, ToolChoice: ant.ToolChoiceUnionParam{OfAny: &ant.ToolChoiceAnyParam{DisableParallelToolUse: ant.Bool(true)}}},
			nil, "tool_use", ant.StopReasonToolUse},
	}
	for _, n := range []struct {
		name string
		n    *node.Node
	}{{"node", a}, {"forwarded", b}} {
		c := client(n.n, testKey)
		for _, tt := range tests {
			t.Run(n.name+"/"+tt.name, func(t *testing.T) {
				whole, err := c.Messages.New(context.Background(), tt.params, tt.opts...)
				check(t, err)
				s := c.Messages.NewStreaming(context.Background(), tt.params, tt.opts...)
				var streamed ant.Message
				for s.Next() {
					if err := streamed.Accumulate(s.Current()); err != nil {
						t.Fatal(err)
					}
				}
				check(t, s.Err())
				for _, m := range []ant.Message{*whole, streamed} {
					if got := blockKinds(m); !regexp.MustCompile("^("+tt.kinds+")$").MatchString(got) || m.StopReason != tt.stop {
						t.Fatalf("blocks %q, stop_reason %s; want %q, %s: %s", got, m.StopReason, tt.kinds, tt.stop, m.RawJSON())
					}
					last := m.Content[len(m.Content)-1]
					switch last.Type {
					case "text":
						checkAnswer(t, last.Text)
					case "tool_use":
						var in map[string]any
						if err := json.Unmarshal(last.Input, &in); err != nil || len(in) != 1 || last.Name != "get_weather" {
							t.Fatalf("tool_use %s: %v", last.RawJSON(), err)
						}
						if city, ok := in["city"].(string); !ok || len([]rune(city)) > 12 {
							t.Fatalf("tool_use input %s", last.Input)
						}
					}
					if m.Content[0].Type == "thinking" && (m.Content[0].Thinking == "" || m.Content[0].Signature == "") {
						t.Fatalf("thinking block %s", m.Content[0].RawJSON())
					}
				}
			})
		}
	}
	t.Logf("answers in %v", time.Since(start))

	// Refusals: Anthropic's error shape, a 400 invalid_request_error
	// naming the field, whole and streamed; the engine's (a schema the
	// grammar cannot enforce) come from a, through b too.
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	schema := `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`
	refusals := []struct{ name, body, want string }{
		{"format type", `"output_config":{"format":{"type":"json_object"}}`, "output_config.format.type: Input should be 'json_schema'"},
		{"format without type", `"output_config":{"format":{"schema":` + schema + `}}`, "output_config.format.type: Field required"},
		{"format not an object", `"output_config":{"format":"json"}`, "output_config.format: Input should be a valid dictionary"},
		{"missing schema", `"output_config":{"format":{"type":"json_schema"}}`, "output_config.format.schema: Field required"},
		{"schema not an object", `"output_config":{"format":{"type":"json_schema","schema":"{}"}}`, "output_config.format.schema: Input should be a valid dictionary"},
		{"unenforceable schema", `"output_config":{"format":{"type":"json_schema","schema":{"type":"string","contentMediaType":"text/html"}}}`,
			`output_config.format.schema: the schema keyword "contentMediaType"`},
		{"external $ref", `"output_format":{"type":"json_schema","schema":{"$ref":"https://example.com/s.json"}}`, `output_format.schema: the schema keyword "$ref"`},
		{"invalid schema", `"output_config":{"format":{"type":"json_schema","schema":{"type":5}}}`, "output_config.format.schema: "},
		{"both spellings", `"output_config":{"format":{"type":"json_schema","schema":` + schema + `}},"output_format":{"type":"json_schema","schema":` + schema + `}`,
			"Both output_format and output_config.format"},
		{"beta format type", `"output_format":{"type":"text"}`, "output_format.type: Input should be 'json_schema'"},
		{"strict not a boolean", `"tools":[{"name":"t","strict":"yes","input_schema":{"type":"object"}}]`, "tools.0.strict: Input should be a valid boolean"},
	}
	for _, n := range []struct {
		name string
		n    *node.Node
	}{{"node", a}, {"forwarded", b}} {
		for _, tt := range refusals {
			for _, stream := range []bool{false, true} {
				t.Run(n.name+"/"+tt.name+"/stream="+strconv.FormatBool(stream), func(t *testing.T) {
					body := `{"model":"demo","max_tokens":20,"stream":` + strconv.FormatBool(stream) + `,` + msgs + `,` + tt.body + `}`
					status, h, out := post(t, n.n, "/v1/messages", testKey, body)
					var e struct {
						Type  string
						Error struct{ Type, Message string }
					}
					if err := json.Unmarshal(out, &e); err != nil || status != http.StatusBadRequest || !strings.HasPrefix(h.Get("Content-Type"), "application/json") ||
						e.Type != "error" || e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, tt.want) {
						t.Errorf("%d %s, want a 400 invalid_request_error mentioning %q", status, bytes.TrimSpace(out), tt.want)
					}
				})
			}
		}
	}
	// A prefill cannot be continued as JSON (the Messages API refuses it too).
	prefill := `{"model":"demo","max_tokens":20,"output_config":{"format":{"type":"json_schema","schema":` + schema + `}},` +
		`"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"{\"a\":"}]}`
	if status, _, out := post(t, b, "/v1/messages", testKey, prefill); status != http.StatusBadRequest || !bytes.Contains(out, []byte("prefilled")) {
		t.Errorf("prefill with a format: %d %s", status, out)
	}
}
