package openclaw_test

import (
	"sync"
	"testing"

	"fusion/node"
	"fusion/node/nodetest"
	"fusion/router/openclaw"
)

// TestSharedStore runs three nodes over one session store, standing in
// for the replicated one: each step of the agent flow goes to a different
// node, and a stream opened on a third node shows every event in order,
// because streams follow the store's changes, not the node that served.
// A turn running on one node makes a turn sent to another a 409.
func TestSharedStore(t *testing.T) {
	store := openclaw.NewMemStore(openclaw.MemStoreOptions{})
	t.Cleanup(store.Close)
	models := nodetest.Models(t)
	var nodes []*node.Node
	for range 3 {
		nodes = append(nodes, nodetest.Start(t, nodetest.Options{APIKey: apiKey, MaxTokens: 512, ModelsDir: models, Sessions: store}))
	}
	a, b, c := nodes[0], nodes[1], nodes[2]

	id := createSession(t, a, map[string]any{"model": nodetest.Model, "system_prompt": "You know the weather.", "tools": []any{weatherTool}})
	st := openStream(t, c, id)
	st.expect(t, openclaw.EventConnected, openclaw.EventSessionState)
	if s := sessionOf(t, b, id); s["tools_count"] != 1.0 {
		t.Fatalf("session seen from b: %v", s)
	}

	status, res := call(t, b, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": "What's the weather in Tokyo?"}}, "max_tokens": 24, "seed": 5,
	})
	want(t, "turn on b", status, 200, res)
	assertTurnShape(t, res, id)
	evs := st.expect(t, openclaw.EventTurnStart, openclaw.EventTurnEnd)
	if evs[1].data["content"] != res["content"] {
		t.Fatalf("turn_end on c %v, answer on b %v", evs[1].data, res)
	}

	status, res = call(t, a, "POST", "/v1/openclaw/agent/steer", map[string]any{"session_id": id, "mode": "replace",
		"message": map[string]any{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{
			"id": "call_1", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city":"Tokyo"}`}}}}})
	want(t, "steer on a", status, 200, res)
	st.expect(t, openclaw.EventSessionState)
	status, res = call(t, c, "POST", "/v1/openclaw/agent/tool-results", map[string]any{"session_id": id, "tool_call_id": "call_1", "result": "22C, sunny"})
	want(t, "tool result on c", status, 200, res)
	st.expect(t, openclaw.EventToolResult)

	// A long turn on a; a turn sent to b meanwhile is a 409.
	var wg sync.WaitGroup
	var longStatus int
	var long map[string]any
	wg.Go(func() {
		longStatus, long = call(t, a, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{"max_tokens": 384, "logit_bias": eosBias(t, a)})
	})
	evs = st.expect(t, openclaw.EventTurnStart)
	if evs[0].data["turn"] != 2.0 {
		t.Fatalf("turn_start %v", evs[0].data)
	}
	status, res = call(t, b, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{"max_tokens": 4})
	if code, _ := errorOf(t, res); status != 409 || code != "turn_in_progress" {
		t.Fatalf("turn on b during a's: %d %v", status, res)
	}
	wg.Wait()
	want(t, "long turn on a", longStatus, 200, long)
	st.expect(t, openclaw.EventTurnEnd)

	s := sessionOf(t, c, id)
	if s["turn_count"] != 2.0 || s["message_count"] != 4.0 {
		t.Fatalf("session seen from c: %v", s)
	}
	status, res = call(t, b, "DELETE", "/v1/openclaw/agent/sessions/"+id, nil)
	want(t, "delete on b", status, 200, res)
	st.expect(t, openclaw.EventSessionClosed)
	st.ended(t)
}
