package openai

import (
	"encoding/json"
	"net/http"
	"testing"

	"fusion/engine"
)

func decodeChat(t *testing.T, body string) (*ChatRequest, *Error) {
	t.Helper()
	var req ChatRequest
	return &req, decodeJSON([]byte(body), &req)
}

func TestChatToPlan(t *testing.T) {
	opts := Options{MaxTokens: 100}
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name  string
		body  string
		check func(t *testing.T, p *plan)
	}{
		{"defaults", `{"model":"m",` + msgs + `}`, func(t *testing.T, p *plan) {
			r := p.reqs[0]
			if len(p.reqs) != 1 || r.Model != "m" || r.MaxTokens != 0 || r.Sampling.Temperature != 1 || r.Sampling.TopP != 1 ||
				r.Sampling.RepetitionPenalty != 1 || r.Priority != engine.PriorityBatch || p.stream || p.includeUsage {
				t.Errorf("plan = %+v, req = %+v", p, r)
			}
			if c, _ := r.Messages[0].Get("content"); c != "hi" {
				t.Errorf("content = %v", c)
			}
		}},
		{"sampling", `{"model":"m",` + msgs + `,"temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.05,"repetition_penalty":1.1,
			"presence_penalty":0.5,"frequency_penalty":-0.5,"logit_bias":{"7":-100,"9":5},"seed":42}`, func(t *testing.T, p *plan) {
			s := p.reqs[0].Sampling
			if s.Temperature != 0.5 || s.TopP != 0.9 || s.TopK != 40 || s.MinP != 0.05 || s.RepetitionPenalty != 1.1 ||
				s.PresencePenalty != 0.5 || s.FrequencyPenalty != -0.5 || s.LogitBias[7] != -100 || s.LogitBias[9] != 5 || *s.Seed != 42 {
				t.Errorf("sampling = %+v", s)
			}
		}},
		{"max_completion_tokens wins", `{"model":"m",` + msgs + `,"max_tokens":5,"max_completion_tokens":7}`, func(t *testing.T, p *plan) {
			if p.reqs[0].MaxTokens != 7 {
				t.Errorf("MaxTokens = %d", p.reqs[0].MaxTokens)
			}
		}},
		{"stop string", `{"model":"m",` + msgs + `,"stop":"END"}`, func(t *testing.T, p *plan) {
			if s := p.reqs[0].Stop; len(s) != 1 || s[0] != "END" {
				t.Errorf("Stop = %q", s)
			}
		}},
		{"stop list", `{"model":"m",` + msgs + `,"stop":["a","","b"]}`, func(t *testing.T, p *plan) {
			if s := p.reqs[0].Stop; len(s) != 2 || s[0] != "a" || s[1] != "b" {
				t.Errorf("Stop = %q", s)
			}
		}},
		{"n with seed", `{"model":"m",` + msgs + `,"n":3,"seed":10}`, func(t *testing.T, p *plan) {
			if len(p.reqs) != 3 || *p.reqs[0].Sampling.Seed != 10 || *p.reqs[1].Sampling.Seed != 11 || *p.reqs[2].Sampling.Seed != 12 {
				t.Errorf("reqs = %d", len(p.reqs))
			}
		}},
		{"stream with usage", `{"model":"m",` + msgs + `,"stream":true,"stream_options":{"include_usage":true}}`, func(t *testing.T, p *plan) {
			if !p.stream || !p.includeUsage {
				t.Errorf("stream=%v usage=%v", p.stream, p.includeUsage)
			}
		}},
		{"logprobs", `{"model":"m",` + msgs + `,"logprobs":true,"top_logprobs":3}`, func(t *testing.T, p *plan) {
			s := p.reqs[0].Sampling
			if !p.logprobs || p.topLogprobs != 3 || !s.Logprobs || s.TopLogprobs != 3 {
				t.Errorf("plan %+v sampling %+v", p, s)
			}
		}},
		{"task tag", `{"model":"m",` + msgs + `,"task_tag":"claude_code"}`, func(t *testing.T, p *plan) {
			if p.reqs[0].Priority != engine.PriorityRealtime {
				t.Errorf("priority = %v", p.reqs[0].Priority)
			}
		}},
		{"content parts and developer role", `{"model":"m","messages":[{"role":"developer","content":"sys"},
			{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"enable_thinking":false}`, func(t *testing.T, p *plan) {
			r := p.reqs[0]
			if role, _ := r.Messages[0].Get("role"); role != "system" {
				t.Errorf("role = %v", role)
			}
			if c, _ := r.Messages[1].Get("content"); c != "a\nb" {
				t.Errorf("content = %q", c)
			}
			if r.EnableThinking == nil || *r.EnableThinking {
				t.Errorf("EnableThinking = %v", r.EnableThinking)
			}
		}},
		{"accepted later-issue fields", `{"model":"m",` + msgs + `,"tools":[],"tool_choice":"auto","parallel_tool_calls":true,
			"response_format":{"type":"text"},"backend_override":"cpu","user":"u1"}`, func(t *testing.T, p *plan) {
			if p.reqs[0].Backend != "cpu" {
				t.Errorf("Backend = %q, want cpu (backend_override)", p.reqs[0].Backend)
			}
		}},
		{"backend cloud", `{"model":"m",` + msgs + `,"backend_override":"cloud"}`, func(t *testing.T, p *plan) {
			if p.reqs[0].Backend != engine.BackendCloud || p.reqs[0].Speculative {
				t.Errorf("Backend = %q, speculative %v, want cloud", p.reqs[0].Backend, p.reqs[0].Speculative)
			}
		}},
		{"backend rapid drafts", `{"model":"m",` + msgs + `,"backend_override":"rapid"}`, func(t *testing.T, p *plan) {
			if r := p.reqs[0]; !r.Speculative || r.Backend != "" {
				t.Errorf("Speculative = %v, Backend = %q; want drafting on any backend", r.Speculative, r.Backend)
			}
		}},
		{"forced named tool, no parallel calls", `{"model":"m",` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}}],
			"tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false}`, func(t *testing.T, p *plan) {
			want := engine.ToolChoice{Mode: engine.ToolNamed, Name: "f", NoParallel: true}
			if got := p.reqs[0].ToolChoice; got != want {
				t.Errorf("ToolChoice = %+v, want %+v", got, want)
			}
		}},
		{"required", `{"model":"m",` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"}`, func(t *testing.T, p *plan) {
			if got := p.reqs[0].ToolChoice; got != (engine.ToolChoice{Mode: engine.ToolRequired}) {
				t.Errorf("ToolChoice = %+v", got)
			}
		}},
		{"none hides the tools", `{"model":"m",` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none"}`, func(t *testing.T, p *plan) {
			if r := p.reqs[0]; r.ToolChoice.Mode != engine.ToolNone || r.Tools != nil {
				t.Errorf("ToolChoice = %+v, tools %v", r.ToolChoice, r.Tools)
			}
		}},
		{"top_p zero is greedy-like", `{"model":"m",` + msgs + `,"top_p":0}`, func(t *testing.T, p *plan) {
			if tp := p.reqs[0].Sampling.TopP; tp <= 0 || tp > 1e-300 {
				t.Errorf("TopP = %v", tp)
			}
		}},
		{"nulls are absent", `{"model":"m",` + msgs + `,"temperature":null,"stop":null,"n":null,"tools":null}`, func(t *testing.T, p *plan) {
			if p.reqs[0].Sampling.Temperature != 1 || p.reqs[0].Stop != nil {
				t.Errorf("req = %+v", p.reqs[0])
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, e := decodeChat(t, tt.body)
			if e != nil {
				t.Fatalf("decode: %v", e)
			}
			p, e := req.toPlan(opts, "id", nil)
			if e != nil {
				t.Fatalf("toPlan: %v", e)
			}
			tt.check(t, p)
		})
	}
}

func TestChatErrors(t *testing.T) {
	opts := Options{MaxTokens: 100}
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name   string
		body   string
		status int
		param  string
		code   string
	}{
		{"empty body", ``, 400, "", "invalid_json"},
		{"not an object", `[1,2]`, 400, "", "invalid_json"},
		{"syntax", `{"model":`, 400, "", "invalid_json"},
		{"trailing", `{"model":"m"} {}`, 400, "", "invalid_json"},
		{"model missing", `{` + msgs + `}`, 400, "model", "missing_required_parameter"},
		{"model number", `{"model":5,` + msgs + `}`, 400, "model", "invalid_type"},
		{"messages missing", `{"model":"m"}`, 400, "messages", "missing_required_parameter"},
		{"messages string", `{"model":"m","messages":"hi"}`, 400, "messages", "invalid_type"},
		{"messages empty", `{"model":"m","messages":[]}`, 400, "messages", "invalid_value"},
		{"message not object", `{"model":"m","messages":["hi"]}`, 400, "messages[0]", "invalid_type"},
		{"role missing", `{"model":"m","messages":[{"content":"hi"}]}`, 400, "messages[0].role", "missing_required_parameter"},
		{"role unknown", `{"model":"m","messages":[{"role":"robot","content":"hi"}]}`, 400, "messages[0].role", "invalid_value"},
		{"content number", `{"model":"m","messages":[{"role":"user","content":5}]}`, 400, "messages[0].content", "invalid_type"},
		{"user content null", `{"model":"m","messages":[{"role":"user","content":null}]}`, 400, "messages[0].content", "invalid_type"},
		{"image part", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "messages[0].content[0].type", "unsupported_parameter"},
		{"tool without id", `{"model":"m","messages":[{"role":"tool","content":"x"}]}`, 400, "messages[0].tool_call_id", "missing_required_parameter"},
		{"temperature string", `{"model":"m",` + msgs + `,"temperature":"hot"}`, 400, "temperature", "invalid_type"},
		{"temperature high", `{"model":"m",` + msgs + `,"temperature":2.5}`, 400, "temperature", "invalid_value"},
		{"top_p high", `{"model":"m",` + msgs + `,"top_p":1.5}`, 400, "top_p", "invalid_value"},
		{"top_k negative", `{"model":"m",` + msgs + `,"top_k":-3}`, 400, "top_k", "invalid_value"},
		{"presence", `{"model":"m",` + msgs + `,"presence_penalty":3}`, 400, "presence_penalty", "invalid_value"},
		{"logit_bias key", `{"model":"m",` + msgs + `,"logit_bias":{"x":1}}`, 400, "logit_bias", "invalid_value"},
		{"logit_bias value", `{"model":"m",` + msgs + `,"logit_bias":{"1":500}}`, 400, "logit_bias", "invalid_value"},
		{"logit_bias type", `{"model":"m",` + msgs + `,"logit_bias":{"1":"a"}}`, 400, "logit_bias", "invalid_type"},
		{"max_tokens zero", `{"model":"m",` + msgs + `,"max_tokens":0}`, 400, "max_tokens", "invalid_value"},
		{"max_tokens fraction", `{"model":"m",` + msgs + `,"max_tokens":1.5}`, 400, "max_tokens", "invalid_type"},
		{"max_tokens over cap", `{"model":"m",` + msgs + `,"max_tokens":101}`, 400, "max_tokens", "invalid_value"},
		{"max_completion_tokens over cap", `{"model":"m",` + msgs + `,"max_completion_tokens":101}`, 400, "max_completion_tokens", "invalid_value"},
		{"n zero", `{"model":"m",` + msgs + `,"n":0}`, 400, "n", "invalid_value"},
		{"stop number", `{"model":"m",` + msgs + `,"stop":5}`, 400, "stop", "invalid_type"},
		{"stop too many", `{"model":"m",` + msgs + `,"stop":["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"]}`, 400, "stop", "invalid_value"},
		{"stream string", `{"model":"m",` + msgs + `,"stream":"yes"}`, 400, "stream", "invalid_type"},
		{"stream_options without stream", `{"model":"m",` + msgs + `,"stream_options":{"include_usage":true}}`, 400, "stream_options", "invalid_value"},
		{"include_usage type", `{"model":"m",` + msgs + `,"stream":true,"stream_options":{"include_usage":1}}`, 400, "stream_options.include_usage", "invalid_type"},
		{"top_logprobs without logprobs", `{"model":"m",` + msgs + `,"top_logprobs":2}`, 400, "top_logprobs", "invalid_value"},
		{"top_logprobs high", `{"model":"m",` + msgs + `,"logprobs":true,"top_logprobs":21}`, 400, "top_logprobs", "invalid_value"},
		{"tools bad", `{"model":"m",` + msgs + `,"tools":[{"type":"function"}]}`, 400, "tools[0].function", "missing_required_parameter"},
		{"tools object", `{"model":"m",` + msgs + `,"tools":{}}`, 400, "tools", "invalid_type"},
		{"tool_choice required without tools", `{"model":"m",` + msgs + `,"tool_choice":"required"}`, 400, "tool_choice", "invalid_value"},
		{"tool_choice undeclared name", `{"model":"m",` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, 400, "tool_choice", "invalid_value"},
		{"tool_choice without name", `{"model":"m",` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{}}}`, 400, "tool_choice.function.name", "missing_required_parameter"},
		{"tool_choice bogus", `{"model":"m",` + msgs + `,"tool_choice":"maybe"}`, 400, "tool_choice", "invalid_value"},
		{"tool_choice number", `{"model":"m",` + msgs + `,"tool_choice":1}`, 400, "tool_choice", "invalid_type"},
		{"response_format json_schema without schema object", `{"model":"m",` + msgs + `,"response_format":{"type":"json_schema"}}`, 400, "response_format.json_schema", "missing_required_parameter"},
		{"response_format bogus", `{"model":"m",` + msgs + `,"response_format":{"type":"xml"}}`, 400, "response_format.type", "invalid_value"},
		{"task_tag bogus", `{"model":"m",` + msgs + `,"task_tag":"urgent"}`, 400, "task_tag", "invalid_value"},
		{"backend bogus", `{"model":"m",` + msgs + `,"backend_override":"gpu9"}`, 400, "backend_override", "invalid_value"},
		{"enable_thinking string", `{"model":"m",` + msgs + `,"enable_thinking":"yes"}`, 400, "enable_thinking", "invalid_type"},
		{"seed fraction", `{"model":"m",` + msgs + `,"seed":1.5}`, 400, "seed", "invalid_type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, e := decodeChat(t, tt.body)
			if e == nil {
				_, e = req.toPlan(opts, "id", nil)
			}
			if e == nil {
				t.Fatal("no error")
			}
			if e.Status != tt.status || e.Param != tt.param || e.Code != tt.code || e.Type != TypeInvalidRequest || e.Message == "" {
				t.Errorf("error = %+v, want status %d param %q code %q", e, tt.status, tt.param, tt.code)
			}
		})
	}
}

func TestCompletionToPlan(t *testing.T) {
	opts := Options{MaxTokens: 100, CompletionsAsChat: map[string]bool{"chatty": true}}
	tests := []struct {
		name     string
		body     string
		prompts  int
		promptOf []int
		check    func(t *testing.T, p *plan)
	}{
		{"string", `{"model":"m","prompt":"Once"}`, 1, []int{0}, func(t *testing.T, p *plan) {
			if *p.reqs[0].Prompt != "Once" || p.reqs[0].Messages != nil {
				t.Errorf("req = %+v", p.reqs[0])
			}
		}},
		{"strings with n", `{"model":"m","prompt":["a","b"],"n":2}`, 2, []int{0, 0, 1, 1}, func(t *testing.T, p *plan) {
			if *p.reqs[0].Prompt != "a" || *p.reqs[2].Prompt != "b" {
				t.Errorf("prompts %q %q", *p.reqs[0].Prompt, *p.reqs[2].Prompt)
			}
		}},
		{"token ids", `{"model":"m","prompt":[1,2,3]}`, 1, []int{0}, func(t *testing.T, p *plan) {
			if len(p.reqs[0].PromptTokens) != 3 || p.reqs[0].Prompt != nil {
				t.Errorf("req = %+v", p.reqs[0])
			}
		}},
		{"token id lists", `{"model":"m","prompt":[[1,2],[3]]}`, 2, []int{0, 1}, func(t *testing.T, p *plan) {
			if len(p.reqs[1].PromptTokens) != 1 {
				t.Errorf("req = %+v", p.reqs[1])
			}
		}},
		{"as chat", `{"model":"chatty","prompt":"hi"}`, 1, []int{0}, func(t *testing.T, p *plan) {
			if p.reqs[0].Prompt != nil || len(p.reqs[0].Messages) != 1 {
				t.Errorf("req = %+v", p.reqs[0])
			}
		}},
		{"logprobs", `{"model":"m","prompt":"x","logprobs":2}`, 1, []int{0}, func(t *testing.T, p *plan) {
			if !p.reqs[0].Sampling.Logprobs || p.reqs[0].Sampling.TopLogprobs != 2 {
				t.Errorf("sampling %+v", p.reqs[0].Sampling)
			}
		}},
		{"empty suffix", `{"model":"m","prompt":"x","suffix":""}`, 1, []int{0}, func(t *testing.T, p *plan) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req CompletionRequest
			if e := decodeJSON([]byte(tt.body), &req); e != nil {
				t.Fatal(e)
			}
			p, prompts, e := req.toPlan(opts, "id")
			if e != nil {
				t.Fatal(e)
			}
			if len(prompts) != tt.prompts || len(p.promptOf) != len(tt.promptOf) {
				t.Fatalf("prompts %d promptOf %v", len(prompts), p.promptOf)
			}
			for i := range tt.promptOf {
				if p.promptOf[i] != tt.promptOf[i] {
					t.Errorf("promptOf = %v, want %v", p.promptOf, tt.promptOf)
				}
			}
			tt.check(t, p)
		})
	}
	errs := []struct{ body, param, code string }{
		{`{"model":"m"}`, "prompt", "missing_required_parameter"},
		{`{"model":"m","prompt":5}`, "prompt", "invalid_type"},
		{`{"model":"m","prompt":[]}`, "prompt", "invalid_value"},
		{`{"model":"m","prompt":["a",5]}`, "prompt[1]", "invalid_type"},
		{`{"model":"m","prompt":[[1],[-1]]}`, "prompt[1]", "invalid_type"},
		{`{"model":"m","prompt":"x","suffix":"end"}`, "suffix", "unsupported_parameter"},
		{`{"model":"m","prompt":"x","logprobs":6}`, "logprobs", "invalid_value"},
		{`{"model":"m","prompt":"x","logprobs":true}`, "logprobs", "invalid_type"},
		{`{"model":"m","prompt":"x","echo":true,"logprobs":1}`, "echo", "unsupported_parameter"},
		{`{"model":"m","prompt":"x","best_of":3}`, "best_of", "unsupported_parameter"},
		{`{"model":"chatty","prompt":[1,2]}`, "prompt", "unsupported_parameter"},
	}
	for _, tt := range errs {
		var req CompletionRequest
		e := decodeJSON([]byte(tt.body), &req)
		if e == nil {
			_, _, e = req.toPlan(opts, "id")
		}
		if e == nil || e.Status != http.StatusBadRequest || e.Param != tt.param || e.Code != tt.code {
			t.Errorf("%s: error = %+v, want param %q code %q", tt.body, e, tt.param, tt.code)
		}
	}
}

func TestErrorJSON(t *testing.T) {
	rec := &recorder{header: http.Header{}}
	WriteError(rec, missingParam("model"))
	var got map[string]map[string]any
	if err := json.Unmarshal(rec.body, &got); err != nil {
		t.Fatal(err)
	}
	e := got["error"]
	if rec.status != 400 || e["message"] != "Missing required parameter: 'model'." || e["type"] != "invalid_request_error" ||
		e["param"] != "model" || e["code"] != "missing_required_parameter" {
		t.Errorf("status %d body %s", rec.status, rec.body)
	}
	rec = &recorder{header: http.Header{}}
	WriteError(rec, FromEngine(engine.ErrOverloaded))
	if rec.status != 429 || rec.header.Get("Retry-After") != "1" {
		t.Errorf("overloaded: status %d headers %v", rec.status, rec.header)
	}
	if err := json.Unmarshal(rec.body, &got); err != nil || got["error"]["param"] != nil {
		t.Errorf("param of overloaded = %v (%v)", got["error"]["param"], err)
	}
}

type recorder struct {
	header http.Header
	status int
	body   []byte
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) WriteHeader(s int)           { r.status = s }
func (r *recorder) Write(b []byte) (int, error) { r.body = append(r.body, b...); return len(b), nil }
