package mcpchat_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/prompt"
	"fusion/mcp/host"
	"fusion/mcp/host/mcptest"
	"fusion/router/mcpchat"
)

// scripted stands in for the model: turn i answers with turns[i] (the
// model's choices are what the test is about; the MCP server is real).
// It records each request it was given.
type scripted struct {
	mu    sync.Mutex
	turns [][]engine.Event
	seen  []*engine.Request
}

func (s *scripted) Generate(_ context.Context, req *engine.Request) (<-chan engine.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := len(s.seen)
	s.seen = append(s.seen, req)
	if i >= len(s.turns) {
		return nil, errors.New("no more turns scripted")
	}
	ch := make(chan engine.Event, len(s.turns[i]))
	for _, ev := range s.turns[i] {
		ch <- ev
	}
	close(ch)
	return ch, nil
}

func (s *scripted) Models(context.Context) ([]engine.ModelInfo, error) { return nil, nil }
func (s *scripted) Tokenize(context.Context, string, prompt.Request) (prompt.Result, error) {
	return prompt.Result{}, nil
}
func (s *scripted) Detokenize(context.Context, string, []int) (string, error) { return "", nil }

func call(id, name, args string) engine.Event {
	return engine.Event{ToolCalls: []engine.ToolCall{{ID: id, Name: name, Arguments: args}}}
}

func done(reason engine.FinishReason, prompt, completion int) engine.Event {
	return engine.Event{Done: true, FinishReason: reason, Usage: engine.Usage{PromptTokens: prompt, CompletionTokens: completion}}
}

// everything runs server-everything as "ev" and waits until it is ready.
func everything(t *testing.T) *host.Host {
	t.Helper()
	node, script := mcptest.Everything(t)
	h := host.New(host.Config{Servers: []host.ServerConfig{{Name: "ev", Command: node, Args: []string{script, "stdio"}}}}, host.Options{})
	t.Cleanup(func() { h.Close() })
	for deadline := time.Now().Add(60 * time.Second); h.Servers()[0].State != host.StateReady; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("ev: %+v", h.Servers())
		}
	}
	return h
}

func collect(t *testing.T, ch <-chan engine.Event) []engine.Event {
	t.Helper()
	var out []engine.Event
	for ev := range ch {
		out = append(out, ev)
	}
	return out
}

// TestLoop runs the loop on a real MCP server (server-everything's echo)
// with scripted model turns: the history of each next turn, the events
// shown, the usage summed, the step limit, client calls ending the answer
// and a failed call shown to the model.
func TestLoop(t *testing.T) {
	h := everything(t)
	runner := &mcpchat.Runner{Host: h, MaxSteps: 2}
	ts, err := runner.Resolve([]mcpchat.Ref{{Server: "ev", Allowed: []string{"echo"}}})
	if err != nil {
		t.Fatal(err)
	}
	if names := ts.Names(); len(names) != 1 || names[0] != "echo" {
		t.Fatalf("names %v", names)
	}
	user := []*chattemplate.Object{chattemplate.NewObject("role", "user", "content", "hi")}
	base := &engine.Request{ID: "r", Messages: user, Tools: ts.Definitions(),
		ToolChoice: engine.ToolChoice{Mode: engine.ToolNamed, Name: "echo"}}

	t.Run("call then answer", func(t *testing.T) {
		gen := &scripted{turns: [][]engine.Event{
			{{Text: "let me see"}, call("call_1", "echo", `{"message":"ping"}`), done(engine.FinishToolCalls, 10, 5)},
			{{Text: "it said ping"}, done(engine.FinishStop, 30, 4)},
		}}
		ch, err := ts.Generate(t.Context(), gen, base)
		if err != nil {
			t.Fatal(err)
		}
		evs := collect(t, ch)
		var text strings.Builder
		var steps []*engine.ServerToolStep
		for _, ev := range evs {
			text.WriteString(ev.Text)
			if ev.ServerTool != nil {
				steps = append(steps, ev.ServerTool)
			}
			if len(ev.ToolCalls) > 0 {
				t.Errorf("an MCP call reached the client's tool calls: %+v", ev.ToolCalls)
			}
		}
		last := evs[len(evs)-1]
		if !last.Done || last.FinishReason != engine.FinishStop || last.Usage.PromptTokens != 40 || last.Usage.CompletionTokens != 9 {
			t.Errorf("final event %+v", last)
		}
		if text.String() != "let me seeit said ping" {
			t.Errorf("text %q", text.String())
		}
		if len(steps) != 2 || steps[0].Done || !steps[1].Done || steps[1].Output != "Echo: ping" || steps[1].IsError ||
			steps[0].Server != "ev" || steps[0].Name != "echo" || steps[0].ID != "call_1" {
			t.Fatalf("steps %+v", steps)
		}
		// The second turn saw the call and its real result, and was free
		// to answer.
		second := gen.seen[1]
		if second.ToolChoice.Mode != engine.ToolAuto || len(second.Messages) != 3 {
			t.Fatalf("second turn: choice %+v, %d messages", second.ToolChoice, len(second.Messages))
		}
		asst, tool := second.Messages[1], second.Messages[2]
		if role, _ := asst.Get("role"); role != "assistant" {
			t.Errorf("message 1 %v", asst)
		}
		if calls, _ := asst.Get("tool_calls"); calls == nil {
			t.Errorf("the assistant turn lacks its calls")
		}
		if role, _ := tool.Get("role"); role != "tool" {
			t.Errorf("message 2 %v", tool)
		}
		if c, _ := tool.Get("content"); c != "Echo: ping" {
			t.Errorf("the tool message holds %v", c)
		}
		if id, _ := tool.Get("tool_call_id"); id != "call_1" {
			t.Errorf("tool_call_id %v", id)
		}
	})

	t.Run("step limit", func(t *testing.T) {
		turn := []engine.Event{call("call_x", "echo", `{"message":"again"}`), done(engine.FinishToolCalls, 1, 1)}
		gen := &scripted{turns: [][]engine.Event{turn, turn, turn}}
		ch, _ := ts.Generate(t.Context(), gen, base)
		evs := collect(t, ch)
		if last := evs[len(evs)-1]; last.FinishReason != engine.FinishToolStepLimit || len(gen.seen) != 2 {
			t.Errorf("final %+v after %d turns", last, len(gen.seen))
		}
	})

	t.Run("client call ends the answer", func(t *testing.T) {
		gen := &scripted{turns: [][]engine.Event{{
			{ToolCalls: []engine.ToolCall{{ID: "call_a", Name: "echo", Arguments: `{"message":"m"}`}, {Index: 1, ID: "call_b", Name: "get_weather", Arguments: "{}"}}},
			done(engine.FinishToolCalls, 1, 1),
		}}}
		ch, _ := ts.Generate(t.Context(), gen, base)
		var client []engine.ToolCall
		ran := false
		var last engine.Event
		for _, ev := range collect(t, ch) {
			client = append(client, ev.ToolCalls...)
			if ev.ServerTool != nil && ev.ServerTool.Done {
				ran = true
			}
			last = ev
		}
		if len(client) != 1 || client[0].Name != "get_weather" || !ran || last.FinishReason != engine.FinishToolCalls || len(gen.seen) != 1 {
			t.Errorf("client calls %+v, MCP call ran %v, final %+v, turns %d", client, ran, last, len(gen.seen))
		}
	})

	t.Run("failed call is a result", func(t *testing.T) {
		gen := &scripted{turns: [][]engine.Event{
			{call("call_1", "echo", `{"message": 7}`), done(engine.FinishToolCalls, 1, 1)},
			{done(engine.FinishStop, 1, 1)},
		}}
		ch, _ := ts.Generate(t.Context(), gen, base)
		var res *engine.ServerToolStep
		for _, ev := range collect(t, ch) {
			if ev.ServerTool != nil && ev.ServerTool.Done {
				res = ev.ServerTool
			}
		}
		if res == nil || !res.IsError || !strings.Contains(res.Output, "arguments.message") {
			t.Errorf("bad arguments: %+v", res)
		}
	})

	for _, tc := range []struct {
		ref   mcpchat.Ref
		param string
	}{
		{mcpchat.Ref{Server: "nope", Param: "tools[0]"}, "tools[0].server_label"},
		{mcpchat.Ref{Server: "ev", Allowed: []string{"rm"}, Param: "tools[1]"}, "tools[1].allowed_tools"},
	} {
		_, err := runner.Resolve([]mcpchat.Ref{tc.ref})
		var re *mcpchat.RefError
		if !errors.As(err, &re) || re.Param != tc.param || re.NotReady {
			t.Errorf("%+v: %v, want a RefError on %s", tc.ref, err, tc.param)
		}
	}
	var none *mcpchat.Runner
	if _, err := none.Resolve([]mcpchat.Ref{{Server: "ev"}}); err == nil {
		t.Error("a runner without a host resolved a server")
	}
}
