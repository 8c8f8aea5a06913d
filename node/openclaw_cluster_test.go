package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"fusion/node"
	"fusion/node/nodetest"
	"fusion/router/openclaw"
)

func ocCall(t *testing.T, n *node.Node, method, path string, body any) (int, map[string]any) {
	t.Helper()
	status, out, _ := ocDo(t, n, method, path, body)
	return status, out
}

// ocDo sends a JSON request and returns the status, the decoded answer
// and the node that ran it (X-Fusion-Node).
func ocDo(t *testing.T, n *node.Node, method, path string, body any) (int, map[string]any, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	req, _ := http.NewRequest(method, n.URL()+path, rd)
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, out, resp.Header.Get("X-Fusion-Node")
}

func ocOK(t *testing.T, what string, n *node.Node, method, path string, body any) map[string]any {
	t.Helper()
	status, res := ocCall(t, n, method, path, body)
	if status != 200 {
		t.Fatalf("%s: %d %v", what, status, res)
	}
	return res
}

type ocEvent struct {
	name string
	data map[string]any
}

func ocStream(t *testing.T, n *node.Node, id string) <-chan ocEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", n.URL()+"/v1/openclaw/agent/stream/"+id, nil)
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", resp, err)
	}
	ch := make(chan ocEvent, 256)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var name string
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				name = v
			} else if v, ok := strings.CutPrefix(sc.Text(), "data: "); ok && name != "heartbeat" {
				var d map[string]any
				_ = json.Unmarshal([]byte(v), &d)
				ch <- ocEvent{name, d}
			}
		}
	}()
	return ch
}

func ocExpect(t *testing.T, ch <-chan ocEvent, names ...string) []ocEvent {
	t.Helper()
	var got []ocEvent
	for _, want := range names {
		select {
		case ev, ok := <-ch:
			if !ok || ev.name != want {
				t.Fatalf("events %v then %v (open %v), want %v", got, ev, ok, names)
			}
			got = append(got, ev)
		case <-time.After(20 * time.Second):
			t.Fatalf("no %s within 20 s (got %v)", want, got)
		}
	}
	return got
}

// ocLeader waits for a leader among nodes and returns it and the others.
func ocLeader(t *testing.T, nodes []*node.Node) (*node.Node, []*node.Node) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		for i, n := range nodes {
			if n.Cluster().IsLeader() {
				return n, append(slices.Clone(nodes[:i]), nodes[i+1:]...)
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
	}
}

// ocCluster starts three clustered nodes with the models dirs given (""
// for the demo model) and the OpenClaw options o.
func ocCluster(t *testing.T, o openclaw.Options, models ...string) []*node.Node {
	t.Helper()
	for i, m := range models {
		if m == "" {
			models[i] = nodetest.Models(t)
		}
	}
	cfg := func(id string, join []string) node.ClusterConfig { return nodetest.Member(id, 3, join) }
	nodes := make([]*node.Node, len(models))
	nodes[0] = nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models[0], OpenClaw: o, Cluster: cfg("a", nil)})
	var wg sync.WaitGroup
	for i := 1; i < len(models); i++ {
		wg.Go(func() {
			nodes[i] = nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models[i], OpenClaw: o,
				Cluster: cfg(string(rune('a'+i)), []string{nodes[0].Cluster().GossipAddr()})})
		})
	}
	wg.Wait()
	return nodes
}

// ocNoEOS bans the demo model's end tokens, so a turn runs to max_tokens.
func ocNoEOS(t *testing.T, n *node.Node) map[string]int {
	t.Helper()
	bias := map[string]int{}
	for _, s := range []string{"<|im_end|>", "<|endoftext|>"} {
		res := ocOK(t, "tokenize "+s, n, "POST", "/tokenize", map[string]any{"model": nodetest.Model, "prompt": s, "add_special_tokens": false})
		toks, _ := res["tokens"].([]any)
		if len(toks) != 1 {
			t.Fatalf("tokenize %q: %v", s, res)
		}
		bias[fmt.Sprint(toks[0])] = -100
	}
	return bias
}

// TestOpenClawCluster: three clustered nodes keep agent sessions in the
// Raft state. The Typical Agent Flow runs with its steps spread over the
// three nodes (create on the leader A, the forced tool call on B, the
// tool result on C, the final answer on A) and the stream open on C shows
// every event in order with its payload; then the leader, which created
// the session, is stopped, and the session with its history and turn
// count is intact on the survivors, where the next turn succeeds.
func TestOpenClawCluster(t *testing.T) {
	leader, others := ocLeader(t, ocCluster(t, openclaw.Options{}, "", "", ""))
	a, b, c := leader, others[0], others[1]

	weather := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 12}},
			"required": []string{"city"}, "additionalProperties": false}}}
	id := ocOK(t, "create on A", a, "POST", "/v1/openclaw/agent/sessions", map[string]any{"model": nodetest.Model, "system_prompt": "Weather bot.",
		"tools": []any{weather}})["session_id"].(string)
	ev := ocStream(t, c, id)
	evs := ocExpect(t, ev, "connected", "session_state")
	if evs[0].data["session_id"] != id || evs[1].data["session_id"] != id || evs[1].data["turn_count"] != 0.0 ||
		evs[1].data["tools_count"] != 1.0 || evs[1].data["model"] != nodetest.Model || evs[1].data["system_prompt"] != "Weather bot." {
		t.Fatalf("stream opening on C: %v", evs)
	}

	// The model is forced to call the tool.
	res := ocOK(t, "forced turn on B", b, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": "What's the weather in Tokyo?"}}, "max_tokens": 200, "seed": 1,
		"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}})
	calls, _ := res["tool_calls"].([]any)
	if len(calls) != 1 || res["finish_reason"] != "tool_calls" || res["turn"] != 1.0 || res["session_id"] != id {
		t.Fatalf("forced turn on B: %v", res)
	}
	call := calls[0].(map[string]any)
	fn := call["function"].(map[string]any)
	callID, args := call["id"].(string), fn["arguments"].(string)
	var city struct{ City string }
	if fn["name"] != "get_weather" || json.Unmarshal([]byte(args), &city) != nil || len([]rune(city.City)) > 12 {
		t.Fatalf("forced call %v", call)
	}
	evs = ocExpect(t, ev, "turn_start", "tool_call", "turn_end")
	if evs[0].data["session_id"] != id || evs[0].data["turn"] != 1.0 {
		t.Fatalf("turn_start on C: %v", evs[0].data)
	}
	tc, _ := evs[1].data["tool_call"].(map[string]any)
	tf, _ := tc["function"].(map[string]any)
	if evs[1].data["session_id"] != id || evs[1].data["turn"] != 1.0 || tc["id"] != callID || tc["type"] != "function" ||
		tf["name"] != "get_weather" || tf["arguments"] != args {
		t.Fatalf("tool_call on C %v, call on B %v", evs[1].data, call)
	}
	endCalls, _ := evs[2].data["tool_calls"].([]any)
	if evs[2].data["session_id"] != id || evs[2].data["turn"] != 1.0 || len(endCalls) != 1 || endCalls[0].(map[string]any)["id"] != callID {
		t.Fatalf("turn_end on C: %v", evs[2].data)
	}

	const result = `{"temperature": 22, "condition": "sunny"}`
	if got := ocOK(t, "tool result on C", c, "POST", "/v1/openclaw/agent/tool-results", map[string]any{"session_id": id, "tool_call_id": callID, "result": result}); got["message_count"] != 3.0 {
		t.Fatalf("tool result answer %v", got)
	}
	evs = ocExpect(t, ev, "tool_result")
	if evs[0].data["session_id"] != id || evs[0].data["tool_call_id"] != callID || evs[0].data["result"] != result {
		t.Fatalf("tool_result on C: %v", evs[0].data)
	}

	// Step 6 as the contract writes it: no new message. The answer is
	// text (thinking off, end tokens banned, so 16 tokens of content).
	res = ocOK(t, "final turn on A", a, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{"messages": []any{},
		"max_tokens": 16, "seed": 2, "tool_choice": "none", "enable_thinking": false, "logit_bias": ocNoEOS(t, a)})
	content, _ := res["content"].(string)
	if content == "" || len(res["tool_calls"].([]any)) != 0 || res["turn"] != 2.0 || res["finish_reason"] != "length" ||
		res["usage"].(map[string]any)["completion_tokens"] != 16.0 {
		t.Fatalf("final turn on A: %v", res)
	}
	evs = ocExpect(t, ev, "turn_start", "turn_end")
	if evs[0].data["session_id"] != id || evs[0].data["turn"] != 2.0 ||
		evs[1].data["session_id"] != id || evs[1].data["turn"] != 2.0 || evs[1].data["content"] != content || len(evs[1].data["tool_calls"].([]any)) != 0 {
		t.Fatalf("final turn's events on C %v, answer on A %v", evs, res)
	}
	before := ocOK(t, "get on C", c, "GET", "/v1/openclaw/agent/sessions/"+id, nil)
	msgs, _ := before["messages"].([]any)
	var roles []string
	for _, m := range msgs {
		roles = append(roles, m.(map[string]any)["role"].(string))
	}
	if !slices.Equal(roles, []string{"user", "assistant", "tool", "assistant"}) || msgs[3].(map[string]any)["content"] != content ||
		msgs[2].(map[string]any)["tool_call_id"] != callID || msgs[2].(map[string]any)["content"] != result {
		t.Fatalf("history on C: %v", msgs)
	}

	if err := leader.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := ocOK(t, "get on B after the leader stopped", b, "GET", "/v1/openclaw/agent/sessions/"+id, nil)
	if fmt.Sprint(after["messages"]) != fmt.Sprint(before["messages"]) || after["turn_count"] != 2.0 {
		t.Fatalf("after %v, before %v", after, before)
	}
	res = ocOK(t, "turn on B after the leader stopped", b, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": "And tomorrow?"}}, "max_tokens": 8})
	if res["turn"] != 3.0 {
		t.Fatalf("turn %v", res)
	}
	evs = ocExpect(t, ev, "turn_start", "turn_end")
	if evs[0].data["turn"] != 3.0 || evs[1].data["turn"] != 3.0 || evs[1].data["content"] != res["content"] {
		t.Fatalf("turn 3's events on C %v, answer on B %v", evs, res)
	}
}

// TestOpenClawModelOnOneNode: the model is on node a's disk only. A
// session created on b takes turns sent to c and to b; each runs on a
// (X-Fusion-Node), where the model is loaded, with the whole history (the
// second turn's prompt is longer than the first's though its own input is
// shorter), and both turns are appended to the history every node sees.
func TestOpenClawModelOnOneNode(t *testing.T) {
	nodes := ocCluster(t, openclaw.Options{}, "", t.TempDir(), t.TempDir())
	a, b, c := nodes[0], nodes[1], nodes[2]
	// a loads the model; b and c learn from the replicated inventory that
	// a has it ready.
	chat := map[string]any{"model": nodetest.Model, "messages": []any{map[string]any{"role": "user", "content": "warm up"}}, "max_tokens": 2}
	if status, res, by := ocDo(t, a, "POST", "/v1/chat/completions", chat); status != 200 || by != "a" {
		t.Fatalf("chat on a: %d %v, served by %q", status, res, by)
	}
	for _, n := range []*node.Node{b, c} {
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			status, _, by := ocDo(t, n, "POST", "/v1/chat/completions", chat)
			if status == 200 && by == "a" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s does not forward to a: %d, served by %q", n.Cluster().ID(), status, by)
			}
		}
	}

	id := ocOK(t, "create on b", b, "POST", "/v1/openclaw/agent/sessions", map[string]any{"model": nodetest.Model, "system_prompt": "Be brief."})["session_id"].(string)
	ev := ocStream(t, c, id)
	ocExpect(t, ev, "connected", "session_state")

	turn := func(n *node.Node, input string, want int) map[string]any {
		t.Helper()
		status, res, by := ocDo(t, n, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{
			"messages": []any{map[string]any{"role": "user", "content": input}}, "max_tokens": 8, "seed": want, "enable_thinking": false})
		if status != 200 || by != "a" || res["turn"] != float64(want) || res["session_id"] != id {
			t.Fatalf("turn %d: %d %v, served by %q, want a", want, status, res, by)
		}
		evs := ocExpect(t, ev, "turn_start", "turn_end")
		if evs[0].data["turn"] != float64(want) || evs[1].data["turn"] != float64(want) || evs[1].data["content"] != res["content"] {
			t.Fatalf("turn %d's events %v, answer %v", want, evs, res)
		}
		return res
	}
	first := turn(c, "What is the weather like in Tokyo, Osaka and Kyoto this week?", 1)
	second := turn(b, "Why?", 2)
	p1 := first["usage"].(map[string]any)["prompt_tokens"].(float64)
	p2 := second["usage"].(map[string]any)["prompt_tokens"].(float64)
	if p2 <= p1 {
		t.Fatalf("turn 2's prompt has %v tokens, turn 1's %v: the history was not sent", p2, p1)
	}

	want := []any{
		map[string]any{"role": "user", "content": "What is the weather like in Tokyo, Osaka and Kyoto this week?"},
		map[string]any{"role": "assistant", "content": first["content"]},
		map[string]any{"role": "user", "content": "Why?"},
		map[string]any{"role": "assistant", "content": second["content"]},
	}
	for _, n := range nodes {
		s := ocOK(t, "get", n, "GET", "/v1/openclaw/agent/sessions/"+id, nil)
		if s["turn_count"] != 2.0 || s["active"] != false || fmt.Sprint(s["messages"]) != fmt.Sprint(want) {
			t.Fatalf("session seen from %s: %v, want messages %v", n.Cluster().ID(), s, want)
		}
	}
}

// TestOpenClawClusterLifecycle: the session lifecycle over HTTP on the
// Raft store, with a small TTL and cap: a second turn while one runs
// elsewhere is a 409; turns renew the TTL (a session taking turns lives
// past it); left alone a session expires, and a stream on another node
// gets session_closed "expired"; at the cap the least recently accessed
// session is evicted, and its stream gets session_closed "evicted".
func TestOpenClawClusterLifecycle(t *testing.T) {
	const ttl = 4 * time.Second
	nodes := ocCluster(t, openclaw.Options{TTL: ttl, Cap: 3, Heartbeat: 200 * time.Millisecond}, "", "", "")
	a, b, c := nodes[0], nodes[1], nodes[2]
	ocLeader(t, nodes)
	create := func(n *node.Node) string {
		t.Helper()
		return ocOK(t, "create", n, "POST", "/v1/openclaw/agent/sessions", map[string]any{"model": nodetest.Model})["session_id"].(string)
	}
	listed := func(n *node.Node) []string {
		t.Helper()
		var ids []string
		for _, s := range ocOK(t, "list", n, "GET", "/v1/openclaw/agent/sessions", nil)["sessions"].([]any) {
			ids = append(ids, s.(map[string]any)["session_id"].(string))
		}
		slices.Sort(ids)
		return ids
	}
	closed := func(ev <-chan ocEvent, id, reason string) {
		t.Helper()
		evs := ocExpect(t, ev, "session_closed")
		if evs[0].data["session_id"] != id || evs[0].data["reason"] != reason {
			t.Fatalf("session_closed %v, want %s", evs[0].data, reason)
		}
		select {
		case e, ok := <-ev:
			if ok {
				t.Fatalf("event %v after session_closed", e)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the stream stayed open after session_closed")
		}
	}

	t.Run("409 on another node", func(t *testing.T) {
		id := create(a)
		ev := ocStream(t, b, id)
		ocExpect(t, ev, "connected", "session_state")
		var wg sync.WaitGroup
		var status int
		var long map[string]any
		wg.Go(func() {
			status, long = ocCall(t, a, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{
				"messages": []any{map[string]any{"role": "user", "content": "Tell me a long story."}}, "max_tokens": 384, "logit_bias": ocNoEOS(t, a)})
		})
		ocExpect(t, ev, "turn_start")
		s, res := ocCall(t, c, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{
			"messages": []any{map[string]any{"role": "user", "content": "Interrupting!"}}, "max_tokens": 4})
		e, _ := res["error"].(map[string]any)
		if s != 409 || e["code"] != "turn_in_progress" || e["param"] != "session_id" || e["type"] == nil || e["message"] == "" {
			t.Fatalf("turn on c during a's: %d %v", s, res)
		}
		wg.Wait()
		if status != 200 || long["usage"].(map[string]any)["completion_tokens"] != 384.0 {
			t.Fatalf("the long turn on a: %d %v", status, long)
		}
		evs := ocExpect(t, ev, "turn_end")
		if evs[0].data["turn"] != 1.0 || evs[0].data["content"] != long["content"] {
			t.Fatalf("turn_end %v", evs[0].data)
		}
		if got := ocOK(t, "get on c", c, "GET", "/v1/openclaw/agent/sessions/"+id, nil); got["turn_count"] != 1.0 || got["message_count"] != 2.0 || got["active"] != false {
			t.Fatalf("session after the 409: %v", got)
		}
		ocOK(t, "delete", b, "DELETE", "/v1/openclaw/agent/sessions/"+id, nil)
		closed(ev, id, "deleted")
	})

	t.Run("turns renew, then expiry", func(t *testing.T) {
		id := create(a)
		ev := ocStream(t, b, id)
		ocExpect(t, ev, "connected", "session_state")
		created := time.Now()
		// Four turns half a TTL apart, on c: the session lives well past
		// one TTL. No GET in between (GET renews too).
		for i := range 4 {
			time.Sleep(ttl / 2)
			status, res := ocCall(t, c, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{
				"messages": []any{map[string]any{"role": "user", "content": "Still there?"}}, "max_tokens": 2})
			if status != 200 || res["turn"] != float64(i+1) {
				t.Fatalf("turn %d, %.1fs after create: %d %v", i+1, time.Since(created).Seconds(), status, res)
			}
			ocExpect(t, ev, "turn_start", "turn_end")
		}
		if age := time.Since(created); age <= ttl {
			t.Fatalf("the turns took %v, not past the TTL", age)
		}
		closed(ev, id, "expired")
		for _, n := range nodes {
			if slices.Contains(listed(n), id) {
				t.Fatalf("expired session listed on %s", n.Cluster().ID())
			}
		}
		if status, res := ocCall(t, a, "GET", "/v1/openclaw/agent/sessions/"+id, nil); status != 404 {
			t.Fatalf("get an expired session: %d %v", status, res)
		}
	})

	t.Run("LRU eviction at the cap", func(t *testing.T) {
		s1, s2, s3 := create(a), create(b), create(c)
		ev := ocStream(t, c, s2)
		ocExpect(t, ev, "connected", "session_state")
		ocOK(t, "get s1", b, "GET", "/v1/openclaw/agent/sessions/"+s1, nil) // s2 is now the least recently accessed
		s4 := create(a)
		closed(ev, s2, "evicted")
		want := []string{s1, s3, s4}
		slices.Sort(want)
		for _, n := range nodes {
			if got := listed(n); !slices.Equal(got, want) {
				t.Fatalf("sessions on %s: %v, want %v", n.Cluster().ID(), got, want)
			}
		}
	})
}
