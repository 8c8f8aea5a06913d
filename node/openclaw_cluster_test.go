package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"fusion/node"
	"fusion/node/nodetest"
)

func ocCall(t *testing.T, n *node.Node, method, path string, body any) (int, map[string]any) {
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
	return resp.StatusCode, out
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

// TestOpenClawCluster: three clustered nodes keep agent sessions in the
// Raft state. The Typical Agent Flow runs with each step on another node
// and the stream on a third; the leader, which created the session, is
// stopped, and the session with its history and turn count is intact on
// the survivors, where the next turn succeeds.
func TestOpenClawCluster(t *testing.T) {
	models := nodetest.Models(t)
	cfg := func(id string, join []string) node.ClusterConfig { return loopback(id, 3, join) }
	first := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Cluster: cfg("a", nil)})
	nodes := []*node.Node{first}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range []string{"b", "c"} {
		wg.Go(func() {
			n := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Cluster: cfg(id, []string{first.Cluster().GossipAddr()})})
			mu.Lock()
			nodes = append(nodes, n)
			mu.Unlock()
		})
	}
	wg.Wait()
	var leader *node.Node
	var others []*node.Node
	for deadline := time.Now().Add(15 * time.Second); leader == nil; {
		for _, n := range nodes {
			if n.Cluster().IsLeader() {
				leader = n
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, n := range nodes {
		if n != leader {
			others = append(others, n)
		}
	}
	x, y := others[0], others[1]

	weather := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 12}},
			"required": []string{"city"}, "additionalProperties": false}}}
	id := ocOK(t, "create on the leader", leader, "POST", "/v1/openclaw/agent/sessions", map[string]any{"model": nodetest.Model, "system_prompt": "Weather bot.",
		"tools": []any{weather}})["session_id"].(string)
	ev := ocStream(t, x, id)
	ocExpect(t, ev, "connected", "session_state")
	// The model is forced to call the tool.
	res := ocOK(t, "turn on y", y, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": "What's the weather in Tokyo?"}}, "max_tokens": 200, "seed": 1,
		"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}})
	calls, _ := res["tool_calls"].([]any)
	if len(calls) != 1 || res["finish_reason"] != "tool_calls" {
		t.Fatalf("forced turn on y: %v", res)
	}
	callID := calls[0].(map[string]any)["id"].(string)
	if evs := ocExpect(t, ev, "turn_start", "tool_call", "turn_end"); evs[1].data["tool_call"].(map[string]any)["id"] != callID {
		t.Fatalf("tool_call on x %v, call on y %v", evs[1].data, calls[0])
	}
	ocOK(t, "tool result on x", x, "POST", "/v1/openclaw/agent/tool-results", map[string]any{"session_id": id, "tool_call_id": callID, "result": "22C"})
	ocExpect(t, ev, "tool_result")
	ocOK(t, "final turn on y", y, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{"max_tokens": 16})
	ocExpect(t, ev, "turn_start", "turn_end")
	before := ocOK(t, "get on x", x, "GET", "/v1/openclaw/agent/sessions/"+id, nil)

	if err := leader.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := ocOK(t, "get on y after the leader stopped", y, "GET", "/v1/openclaw/agent/sessions/"+id, nil)
	if fmt.Sprint(after["messages"]) != fmt.Sprint(before["messages"]) || after["turn_count"] != 2.0 {
		t.Fatalf("after %v, before %v", after, before)
	}
	res = ocOK(t, "turn on y after the leader stopped", y, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": "And tomorrow?"}}, "max_tokens": 8})
	if res["turn"] != 3.0 {
		t.Fatalf("turn %v", res)
	}
	ocExpect(t, ev, "turn_start", "turn_end")
}
