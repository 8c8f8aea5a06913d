package openclaw_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"fusion/node"
	"fusion/node/nodetest"
	"fusion/router/openclaw"
)

// TestAgentFlow runs the contract's Typical Agent Flow over HTTP: create
// a session with a tool, a turn that calls it, the tool's result, a turn
// with no new message that answers; the event stream shows each step in
// order, and session_closed when the session is deleted.
func TestAgentFlow(t *testing.T) {
	n := start(t, openclaw.Options{})
	status, created := call(t, n, "POST", "/v1/openclaw/agent/sessions", map[string]any{
		"model":         nodetest.Model,
		"system_prompt": "You are a helpful assistant with access to weather data.",
		"tools":         []any{weatherTool},
	})
	want(t, "create", status, 200, created)
	id, _ := created["session_id"].(string)
	if len(id) < 12 || created["turn_count"] != 0.0 || created["active"] != false ||
		created["model"] != nodetest.Model || created["tools_count"] != 1.0 {
		t.Fatalf("create answer %v", created)
	}
	if ids := listIDs(t, n); !slices.Equal(ids, []string{id}) {
		t.Fatalf("list = %v, want [%s]", ids, id)
	}

	st := openStream(t, n, id)
	evs := st.expect(t, openclaw.EventConnected, openclaw.EventSessionState)
	if evs[0].data["session_id"] != id || evs[1].data["session_id"] != id || evs[1].data["tools_count"] != 1.0 {
		t.Fatalf("stream start %v", evs)
	}

	// 2–3: the agent asks; the model answers with a call of get_weather.
	// tool_choice forces the call (the engine constrains the output to
	// the family's call format and the tool's parameters).
	ask := map[string]any{
		"messages":    []any{map[string]any{"role": "user", "content": "What's the weather in Tokyo?"}},
		"max_tokens":  200, // room for the whole forced call: the random model writes long strings
		"temperature": 0.7,
		"seed":        7,
		"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}},
	}
	status, res := call(t, n, "POST", "/v1/openclaw/agent/turns?session_id="+id, ask)
	want(t, "forced turn", status, 200, res)
	var callID string
	assertTurnShape(t, res, id)
	calls := res["tool_calls"].([]any)
	if len(calls) != 1 {
		t.Fatalf("forced turn: %d tool calls, want 1: %v", len(calls), res)
	}
	c := calls[0].(map[string]any)
	f := c["function"].(map[string]any)
	var args map[string]any
	if c["type"] != "function" || f["name"] != "get_weather" || json.Unmarshal([]byte(f["arguments"].(string)), &args) != nil {
		t.Fatalf("forced call %v", c)
	}
	callID = c["id"].(string)
	evs = st.expect(t, openclaw.EventTurnStart, openclaw.EventToolCall, openclaw.EventTurnEnd)
	if tc := evs[1].data["tool_call"].(map[string]any); tc["id"] != callID {
		t.Fatalf("tool_call event %v, want id %s", evs[1].data, callID)
	}
	s := sessionOf(t, n, id)
	if s["turn_count"] != 1.0 || s["active"] != false || s["message_count"] != 2.0 {
		t.Fatalf("after turn 1: %v", s)
	}

	// 5: the caller runs the tool and submits its result.
	status, res = call(t, n, "POST", "/v1/openclaw/agent/tool-results", map[string]any{
		"session_id": id, "tool_call_id": callID, "result": `{"temperature": 22, "condition": "sunny"}`,
	})
	want(t, "tool result", status, 200, res)
	if res["message_count"] != 3.0 {
		t.Fatalf("tool result answer %v", res)
	}
	evs = st.expect(t, openclaw.EventToolResult)
	if evs[0].data["tool_call_id"] != callID || evs[0].data["result"] != `{"temperature": 22, "condition": "sunny"}` {
		t.Fatalf("tool_result event %v", evs[0].data)
	}
	// The same result twice, or for a call nobody made: 400.
	for _, cid := range []string{callID, "call_nobody"} {
		status, res = call(t, n, "POST", "/v1/openclaw/agent/tool-results", map[string]any{"session_id": id, "tool_call_id": cid, "result": "x"})
		if code, param := errorOf(t, res); status != 400 || param != "tool_call_id" {
			t.Fatalf("tool result for %s: %d %v %v", cid, status, code, param)
		}
	}

	// 6–7: continue with no new message: the model answers from the
	// history (system prompt, question, call, result). "messages": [] is
	// the contract's "empty message".
	status, res = call(t, n, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{"messages": []any{}, "max_tokens": 32, "seed": 3, "tool_choice": "none"})
	want(t, "turn 2", status, 200, res)
	assertTurnShape(t, res, id)
	if len(res["tool_calls"].([]any)) != 0 {
		t.Fatalf("tool_choice none gave tool calls: %v", res)
	}
	evs = st.expect(t, openclaw.EventTurnStart, openclaw.EventTurnEnd)
	if evs[0].data["turn"] != 2.0 || evs[1].data["turn"] != 2.0 || evs[1].data["content"] != res["content"] {
		t.Fatalf("turn 2 events %v, answer %v", evs, res)
	}

	s = sessionOf(t, n, id)
	msgs, _ := s["messages"].([]any)
	var roles []string
	for _, m := range msgs {
		roles = append(roles, m.(map[string]any)["role"].(string))
	}
	if wantRoles := []string{"user", "assistant", "tool", "assistant"}; s["turn_count"] != 2.0 || !slices.Equal(roles, wantRoles) {
		t.Fatalf("history roles %v (turn_count %v), want %v", roles, s["turn_count"], wantRoles)
	}
	last := msgs[3].(map[string]any)
	if last["content"] != res["content"] {
		t.Fatalf("last message %v, answer %v", last, res)
	}
	if tc := msgs[1].(map[string]any)["tool_calls"].([]any); tc[0].(map[string]any)["id"] != callID {
		t.Fatalf("call message %v", msgs[1])
	}

	// Steering: a system message before the last user message.
	status, res = call(t, n, "POST", "/v1/openclaw/agent/steer", map[string]any{
		"session_id": id, "mode": "prepend", "message": map[string]any{"role": "system", "content": "Now respond in Japanese."},
	})
	want(t, "steer prepend", status, 200, res)
	st.expect(t, openclaw.EventSessionState)
	if m := sessionOf(t, n, id)["messages"].([]any); m[0].(map[string]any)["role"] != "system" || len(m) != 5 {
		t.Fatalf("prepend did not land before the user message: %v", m)
	}
	// Steering at the end of the history, the default mode spelt out.
	status, res = call(t, n, "POST", "/v1/openclaw/agent/steer", map[string]any{
		"session_id": id, "mode": "append", "message": map[string]any{"role": "user", "content": "And in Osaka?"},
	})
	want(t, "steer append", status, 200, res)
	if res["message_count"] != 6.0 || res["turn_count"] != 2.0 {
		t.Fatalf("steer append answer %v", res)
	}
	evs = st.expect(t, openclaw.EventSessionState)
	if evs[0].data["session_id"] != id || evs[0].data["message_count"] != 6.0 {
		t.Fatalf("session_state after append %v", evs[0].data)
	}
	m := sessionOf(t, n, id)["messages"].([]any)
	roles = roles[:0]
	for _, x := range m {
		roles = append(roles, x.(map[string]any)["role"].(string))
	}
	if wantRoles := []string{"system", "user", "assistant", "tool", "assistant", "user"}; !slices.Equal(roles, wantRoles) ||
		m[5].(map[string]any)["content"] != "And in Osaka?" || m[4].(map[string]any)["content"] != last["content"] {
		t.Fatalf("history after append %v, want roles %v", m, wantRoles)
	}

	status, res = call(t, n, "DELETE", "/v1/openclaw/agent/sessions/"+id, nil)
	want(t, "delete", status, 200, res)
	evs = st.expect(t, openclaw.EventSessionClosed)
	if evs[0].data["reason"] != "deleted" {
		t.Fatalf("session_closed %v", evs[0].data)
	}
	st.ended(t)
	if ids := listIDs(t, n); len(ids) != 0 {
		t.Fatalf("list after delete = %v", ids)
	}
	if status, res = call(t, n, "GET", "/v1/openclaw/agent/sessions/"+id, nil); status != 404 {
		t.Fatalf("get after delete: %d %v", status, res)
	}
	t.Log("flow done with a forced tool call")
}

// TestLifecycle checks TTL renewal (by GET and by turns) and expiry, LRU
// eviction at the cap, session_closed on the streams, and heartbeats,
// with small settings.
func TestLifecycle(t *testing.T) {
	const ttl = 3 * time.Second
	n := start(t, openclaw.Options{TTL: ttl, Cap: 3, Heartbeat: 100 * time.Millisecond})

	t.Run("heartbeat", func(t *testing.T) {
		id := createSession(t, n, nil)
		st := openStream(t, n, id)
		beats := 0
		for ev := range st.events {
			if ev.name == openclaw.EventHeartbeat {
				if num(ev.data["timestamp"]) <= 0 {
					t.Fatalf("heartbeat %v", ev.data)
				}
				if beats++; beats == 3 {
					break
				}
			}
		}
		if beats != 3 {
			t.Fatalf("%d heartbeats before the stream ended", beats)
		}
		call(t, n, "DELETE", "/v1/openclaw/agent/sessions/"+id, nil)
	})

	t.Run("renewal and expiry", func(t *testing.T) {
		id := createSession(t, n, nil)
		st := openStream(t, n, id)
		st.expect(t, openclaw.EventConnected, openclaw.EventSessionState)
		created := time.Now()
		// GET renews: three GETs half a TTL apart keep the session alive
		// well past one TTL.
		for i := range 3 {
			time.Sleep(ttl / 2)
			if status, s := call(t, n, "GET", "/v1/openclaw/agent/sessions/"+id, nil); status != 200 {
				t.Fatalf("GET %d (%.1fs after create): %d %v", i, time.Since(created).Seconds(), status, s)
			}
		}
		if age := time.Since(created); age <= ttl {
			t.Fatalf("the renewals took %v, not past the TTL", age)
		}
		// Left alone, it expires: the stream gets session_closed and the
		// session leaves the listing.
		evs := st.expect(t, openclaw.EventSessionClosed)
		if evs[0].data["reason"] != "expired" || evs[0].data["session_id"] != id {
			t.Fatalf("session_closed %v", evs[0].data)
		}
		st.ended(t)
		if slices.Contains(listIDs(t, n), id) {
			t.Fatal("expired session listed")
		}
		if status, _ := call(t, n, "GET", "/v1/openclaw/agent/sessions/"+id, nil); status != 404 {
			t.Fatalf("GET expired session: %d", status)
		}
	})

	t.Run("turns renew", func(t *testing.T) {
		id := createSession(t, n, nil)
		created := time.Now()
		// Three turns half a TTL apart, and no GET: turns alone keep the
		// session alive past one TTL.
		for i := range 3 {
			time.Sleep(ttl / 2)
			status, res := call(t, n, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{
				"messages": []any{map[string]any{"role": "user", "content": "Still there?"}}, "max_tokens": 2})
			if status != 200 || res["turn"] != float64(i+1) {
				t.Fatalf("turn %d (%.1fs after create): %d %v", i+1, time.Since(created).Seconds(), status, res)
			}
		}
		if age := time.Since(created); age <= ttl {
			t.Fatalf("the turns took %v, not past the TTL", age)
		}
		call(t, n, "DELETE", "/v1/openclaw/agent/sessions/"+id, nil)
	})

	t.Run("LRU eviction at the cap", func(t *testing.T) {
		a := createSession(t, n, nil)
		b := createSession(t, n, nil)
		c := createSession(t, n, nil)
		sb := openStream(t, n, b)
		sb.expect(t, openclaw.EventConnected, openclaw.EventSessionState)
		sessionOf(t, n, a) // a is now more recent than b
		d := createSession(t, n, nil)
		evs := sb.expect(t, openclaw.EventSessionClosed)
		if evs[0].data["reason"] != "evicted" {
			t.Fatalf("session_closed %v", evs[0].data)
		}
		ids := listIDs(t, n)
		slices.Sort(ids)
		wantIDs := []string{a, c, d}
		slices.Sort(wantIDs)
		if !slices.Equal(ids, wantIDs) {
			t.Fatalf("sessions %v, want %v", ids, wantIDs)
		}
		for _, id := range wantIDs {
			call(t, n, "DELETE", "/v1/openclaw/agent/sessions/"+id, nil)
		}
	})
}

// TestConcurrentTurns: a second turn while one runs is a 409 and
// changes nothing; the first completes.
func TestConcurrentTurns(t *testing.T) {
	n := start(t, openclaw.Options{})
	id := createSession(t, n, nil)
	st := openStream(t, n, id)
	st.expect(t, openclaw.EventConnected, openclaw.EventSessionState)

	long := map[string]any{
		"messages":   []any{map[string]any{"role": "user", "content": "Tell me a long story."}},
		"max_tokens": 384, "logit_bias": eosBias(t, n), "seed": 1,
	}
	var wg sync.WaitGroup
	var firstStatus int
	var first map[string]any
	wg.Go(func() { firstStatus, first = call(t, n, "POST", "/v1/openclaw/agent/turns?session_id="+id, long) })
	st.expect(t, openclaw.EventTurnStart)
	status, res := call(t, n, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": "Interrupting!"}}, "max_tokens": 4,
	})
	if code, _ := errorOf(t, res); status != 409 || code != "turn_in_progress" {
		t.Fatalf("concurrent turn: %d %v", status, res)
	}
	wg.Wait()
	want(t, "first turn", firstStatus, 200, first)
	if u := first["usage"].(map[string]any); u["completion_tokens"] != 384.0 {
		t.Fatalf("first turn usage %v", u)
	}
	evs := st.expect(t, openclaw.EventTurnEnd)
	if evs[0].data["turn"] != 1.0 {
		t.Fatalf("turn_end %v", evs[0].data)
	}
	s := sessionOf(t, n, id)
	if s["turn_count"] != 1.0 || s["message_count"] != 2.0 || s["active"] != false {
		t.Fatalf("session after the turns %v", s)
	}
	// The turn counts in the node's generation metrics; the refused one
	// does not.
	_, prom := callRaw(t, n, "GET", "/metrics?format=prometheus", nil)
	if line := `fusion_generation_requests_total{model="demo",outcome="ok"} 1`; !strings.Contains(string(prom), line+"\n") {
		t.Fatalf("metrics lack %q:\n%s", line, prom)
	}
}

// TestTurnResponseFormat: a turn's response_format reaches the engine.
// With random weights, only the grammar can make the answer a JSON
// document valid for the schema; the history keeps that answer.
func TestTurnResponseFormat(t *testing.T) {
	n := start(t, openclaw.Options{})
	id := createSession(t, n, map[string]any{"model": nodetest.Model, "system_prompt": "Answer in JSON."})
	schema := map[string]any{"type": "object", "properties": map[string]any{
		"city": map[string]any{"type": "string", "maxLength": 12},
		"temp": map[string]any{"type": "integer"},
		"sky":  map[string]any{"enum": []string{"sunny", "cloudy", "rain"}},
	}, "required": []string{"city", "temp", "sky"}, "additionalProperties": false}
	for turn, seed := range []int{1, 2, 3} {
		status, res := call(t, n, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{
			"messages":    []any{map[string]any{"role": "user", "content": "Weather in Tokyo?"}},
			"max_tokens":  48, // small: the grammar closes the document in time
			"temperature": 1, "seed": seed,
			"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "weather", "schema": schema, "strict": true}},
		})
		want(t, "turn with a response format", status, 200, res)
		content, _ := res["content"].(string)
		var v struct {
			City *string `json:"city"`
			Temp *int    `json:"temp"`
			Sky  *string `json:"sky"`
		}
		dec := json.NewDecoder(strings.NewReader(content))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil || dec.More() || v.City == nil || len([]rune(*v.City)) > 12 || v.Temp == nil ||
			v.Sky == nil || !slices.Contains([]string{"sunny", "cloudy", "rain"}, *v.Sky) {
			t.Fatalf("turn %d: %q is not valid for the schema (%v): %v", turn+1, content, err, res)
		}
		if res["finish_reason"] != "stop" || len(res["tool_calls"].([]any)) != 0 {
			t.Fatalf("turn %d: %v", turn+1, res)
		}
		msgs := sessionOf(t, n, id)["messages"].([]any)
		if last := msgs[len(msgs)-1].(map[string]any); len(msgs) != 2*(turn+1) || last["role"] != "assistant" || last["content"] != content {
			t.Fatalf("turn %d: history %v, answer %q", turn+1, msgs, content)
		}
	}
}

// TestHistoryLimit: a session's history is bounded; what would grow it
// past the bound is a 400 that changes nothing.
func TestHistoryLimit(t *testing.T) {
	n := start(t, openclaw.Options{MaxHistoryBytes: 400})
	id := createSession(t, n, nil)
	steer := map[string]any{"session_id": id, "message": map[string]any{"role": "user", "content": strings.Repeat("x", 100)}}
	accepted := 0
	for range 10 {
		status, res := call(t, n, "POST", "/v1/openclaw/agent/steer", steer)
		if status == 200 {
			accepted++
			continue
		}
		if code, _ := errorOf(t, res); status != 400 || code != "session_history_full" {
			t.Fatalf("steer past the bound: %d %v", status, res)
		}
		break
	}
	if accepted != 3 {
		t.Fatalf("%d steering messages of ~130 bytes fit in 400 bytes, want 3", accepted)
	}
	if s := sessionOf(t, n, id); s["message_count"] != 3.0 {
		t.Fatalf("session %v", s)
	}
	status, res := call(t, n, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{"messages": []any{steer["message"]}})
	if code, _ := errorOf(t, res); status != 400 || code != "session_history_full" {
		t.Fatalf("turn past the bound: %d %v", status, res)
	}
}

// eosBias bans the demo model's end tokens, so a turn runs to max_tokens.
func eosBias(t *testing.T, n *node.Node) map[string]int {
	t.Helper()
	bias := map[string]int{}
	for _, s := range []string{"<|im_end|>", "<|endoftext|>"} {
		status, res := call(t, n, "POST", "/tokenize", map[string]any{"model": nodetest.Model, "prompt": s, "add_special_tokens": false})
		toks, _ := res["tokens"].([]any)
		if status != 200 || len(toks) != 1 {
			t.Fatalf("tokenize %q: %d %v", s, status, res)
		}
		bias[strconv.Itoa(num(toks[0]))] = -100
	}
	return bias
}

// TestErrors: bad input answers 4xx in the OpenAI shape, never a 500.
func TestErrors(t *testing.T) {
	n := start(t, openclaw.Options{})
	id := createSession(t, n, nil)
	const missing = "0123456789abcdef01234567"
	tests := []struct {
		name         string
		method, path string
		body         any
		status       int
		code, param  any
	}{
		{"create without model", "POST", "/v1/openclaw/agent/sessions", `{}`, 400, "missing_required_parameter", "model"},
		{"create with unknown model", "POST", "/v1/openclaw/agent/sessions", `{"model":"nope"}`, 404, "model_not_found", "model"},
		{"create with bad tools", "POST", "/v1/openclaw/agent/sessions", `{"model":"demo","tools":[{"type":"retrieval"}]}`, 400, "invalid_value", "tools[0].type"},
		{"create with a non-string prompt", "POST", "/v1/openclaw/agent/sessions", `{"model":"demo","system_prompt":5}`, 400, "invalid_type", "system_prompt"},
		{"create with bad JSON", "POST", "/v1/openclaw/agent/sessions", `{"model":`, 400, "invalid_json", nil},
		{"get unknown", "GET", "/v1/openclaw/agent/sessions/" + missing, nil, 404, "session_not_found", "session_id"},
		{"delete unknown", "DELETE", "/v1/openclaw/agent/sessions/" + missing, nil, 404, "session_not_found", "session_id"},
		{"turn without session_id", "POST", "/v1/openclaw/agent/turns", `{}`, 400, "missing_required_parameter", "session_id"},
		{"turn on unknown session", "POST", "/v1/openclaw/agent/turns?session_id=" + missing, `{"messages":[{"role":"user","content":"hi"}]}`, 404, "session_not_found", "session_id"},
		{"first turn with nothing to answer", "POST", "/v1/openclaw/agent/turns?session_id=" + id, ``, 400, "invalid_value", "messages"},
		{"turn with bad message", "POST", "/v1/openclaw/agent/turns?session_id=" + id, `{"messages":[{"role":"robot","content":"hi"}]}`, 400, "invalid_value", "messages[0].role"},
		{"turn with messages not an array", "POST", "/v1/openclaw/agent/turns?session_id=" + id, `{"messages":"hi"}`, 400, "invalid_type", "messages"},
		{"turn with bad temperature", "POST", "/v1/openclaw/agent/turns?session_id=" + id, `{"messages":[{"role":"user","content":"hi"}],"temperature":"hot"}`, 400, "invalid_type", "temperature"},
		{"turn with bad response_format", "POST", "/v1/openclaw/agent/turns?session_id=" + id, `{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"xml"}}`, 400, "invalid_value", "response_format.type"},
		{"turn with bad task_tag", "POST", "/v1/openclaw/agent/turns?session_id=" + id, `{"messages":[{"role":"user","content":"hi"}],"task_tag":"urgent"}`, 400, "invalid_value", "task_tag"},
		{"turn with stream", "POST", "/v1/openclaw/agent/turns?session_id=" + id, `{"messages":[{"role":"user","content":"hi"}],"stream":true}`, 400, "unsupported_parameter", "stream"},
		{"turn with n", "POST", "/v1/openclaw/agent/turns?session_id=" + id, `{"messages":[{"role":"user","content":"hi"}],"n":2}`, 400, "unsupported_parameter", "n"},
		{"steer with bad mode", "POST", "/v1/openclaw/agent/steer", `{"session_id":"` + id + `","mode":"insert","message":{"role":"user","content":"x"}}`, 400, "invalid_value", "mode"},
		{"steer without message", "POST", "/v1/openclaw/agent/steer", `{"session_id":"` + id + `","mode":"append"}`, 400, "missing_required_parameter", "message"},
		{"steer with bad message", "POST", "/v1/openclaw/agent/steer", `{"session_id":"` + id + `","message":{"role":"user"}}`, 400, "missing_required_parameter", "message.content"},
		{"steer with a message not an object", "POST", "/v1/openclaw/agent/steer", `{"session_id":"` + id + `","message":"hi"}`, 400, "invalid_type", "message"},
		{"steer unknown session", "POST", "/v1/openclaw/agent/steer", `{"session_id":"` + missing + `","message":{"role":"user","content":"x"}}`, 404, "session_not_found", "session_id"},
		{"steer without session", "POST", "/v1/openclaw/agent/steer", `{"message":{"role":"user","content":"x"}}`, 400, "missing_required_parameter", "session_id"},
		{"tool result for unknown call", "POST", "/v1/openclaw/agent/tool-results", `{"session_id":"` + id + `","tool_call_id":"call_x","result":"1"}`, 400, "unknown_tool_call_id", "tool_call_id"},
		{"tool result without call id", "POST", "/v1/openclaw/agent/tool-results", `{"session_id":"` + id + `","result":"1"}`, 400, "missing_required_parameter", "tool_call_id"},
		{"tool result without result", "POST", "/v1/openclaw/agent/tool-results", `{"session_id":"` + id + `","tool_call_id":"call_x"}`, 400, "missing_required_parameter", "result"},
		{"tool result unknown session", "POST", "/v1/openclaw/agent/tool-results", `{"session_id":"` + missing + `","tool_call_id":"c","result":"1"}`, 404, "session_not_found", "session_id"},
		{"stream unknown session", "GET", "/v1/openclaw/agent/stream/" + missing, nil, 404, "session_not_found", "session_id"},
		{"wrong method", "PUT", "/v1/openclaw/agent/sessions", `{}`, 405, "method_not_allowed", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, res := call(t, n, tt.method, tt.path, tt.body)
			code, param := errorOf(t, res)
			if status != tt.status || code != tt.code || param != tt.param {
				t.Fatalf("%d %v %v, want %d %v %v: %v", status, code, param, tt.status, tt.code, tt.param, res)
			}
		})
	}
	// Nothing above left the session in a turn or changed it.
	if s := sessionOf(t, n, id); s["active"] != false || s["turn_count"] != 0.0 || s["message_count"] != 0.0 {
		t.Fatalf("session after bad requests: %v", s)
	}
	// Junk of every JSON kind at every endpoint: a 4xx in the OpenAI
	// shape (or a 200 where the junk is a valid request), never a 5xx.
	junk := []string{``, `null`, `[]`, `0`, `"x"`, `{}`, `{"session_id":null}`, `{"session_id":5}`, `{"session_id":"` + id + `"}`,
		`{"session_id":"` + id + `","message":[]}`, `{"session_id":"` + id + `","message":{"role":"tool","content":"x"}}`,
		`{"session_id":"` + id + `","tool_call_id":"c","result":{}}`, `{"session_id":"` + id + `","mode":null,"message":{"role":"user","content":[{"type":"image_url"}]}}`,
		`{"messages":null}`, `{"messages":[null]}`, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":0}`,
		`{"messages":[{"role":"user","content":"hi"}],"tool_choice":"sometimes"}`, `{"model":"demo","tools":{}}`, `{"model":["demo"]}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"temperature":-1}`, `{"` + strings.Repeat("[", 500)}
	paths := []string{"/v1/openclaw/agent/sessions", "/v1/openclaw/agent/turns?session_id=" + id, "/v1/openclaw/agent/turns?session_id=x",
		"/v1/openclaw/agent/tool-results", "/v1/openclaw/agent/steer"}
	for _, p := range paths {
		for _, b := range junk {
			status, raw := callRaw(t, n, "POST", p, b)
			if status >= 500 {
				t.Fatalf("POST %s %s: %d %s", p, b, status, raw)
			}
			if status >= 400 {
				var res map[string]any
				if err := json.Unmarshal(raw, &res); err != nil {
					t.Fatalf("POST %s %s: %d %s", p, b, status, raw)
				}
				errorOf(t, res)
			}
		}
	}
	if s := sessionOf(t, n, id); s["active"] != false {
		t.Fatalf("session left in a turn: %v", s)
	}
	// Without the key: 401 in the OpenAI shape.
	req, _ := http.NewRequest("GET", n.URL()+"/v1/openclaw/agent/sessions", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("no key: %d", resp.StatusCode)
	}
}

// TestTurnCancelled: a client that goes away mid-turn ends the turn as
// failed: the session is idle again, its history and count unchanged, and
// the stream shows turn_end with the error.
func TestTurnCancelled(t *testing.T) {
	n := start(t, openclaw.Options{})
	id := createSession(t, n, nil)
	st := openStream(t, n, id)
	st.expect(t, openclaw.EventConnected, openclaw.EventSessionState)

	body, _ := json.Marshal(map[string]any{
		"messages":   []any{map[string]any{"role": "user", "content": "Tell me a long story."}},
		"max_tokens": 512, "logit_bias": eosBias(t, n),
	})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", n.URL()+"/v1/openclaw/agent/turns?session_id="+id, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	done := make(chan error, 1)
	go func() {
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	st.expect(t, openclaw.EventTurnStart)
	cancel()
	if err := <-done; err == nil {
		t.Log("the turn finished before the cancel reached it")
	}
	evs := st.expect(t, openclaw.EventTurnEnd)
	if err, _ := evs[0].data["error"].(string); err == "" && evs[0].data["content"] == nil {
		t.Fatalf("turn_end %v", evs[0].data)
	}
	s := sessionOf(t, n, id)
	if s["active"] != false {
		t.Fatalf("session still active after the cancel: %v", s)
	}
	if _, failed := evs[0].data["error"]; failed && (s["turn_count"] != 0.0 || s["message_count"] != 0.0) {
		t.Fatalf("a failed turn changed the session: %v", s)
	}
}

// TestDrainEndsStreams: stopping a node ends its event streams at once
// instead of holding the drain until its deadline.
func TestDrainEndsStreams(t *testing.T) {
	n := start(t, openclaw.Options{})
	id := createSession(t, n, nil)
	st := openStream(t, n, id)
	st.expect(t, openclaw.EventConnected, openclaw.EventSessionState)
	stopped := make(chan error, 1)
	go func() { stopped <- n.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("stop: %v", err)
		}
	case <-time.After(15 * time.Second): // the drain deadline is 30 s
		t.Fatal("the open stream held the drain")
	}
	st.ended(t)
}
