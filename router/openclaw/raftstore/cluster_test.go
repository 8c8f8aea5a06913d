package raftstore_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"fusion/cluster"
	"fusion/engine/demo"
	"fusion/engine/runner"
	"fusion/router/openai"
	"fusion/router/openclaw"
	"fusion/router/openclaw/raftstore"
)

// clusterNode is one node of the test cluster: a Raft member, the Raft
// session store over it, the real runner with the demo model, and the
// OpenClaw handler on an HTTP server.
type clusterNode struct {
	member *cluster.Member
	store  *raftstore.Store
	h      *openclaw.Handler
	srv    *httptest.Server
	run    *runner.Runner
	once   sync.Once
}

func (n *clusterNode) kill() {
	n.once.Do(func() {
		n.h.Shutdown()
		n.srv.CloseClientConnections()
		n.srv.Close()
		n.store.Close()
		n.member.Close()
		n.run.Close()
	})
}

func startCluster(t *testing.T) []*clusterNode {
	t.Helper()
	models := t.TempDir()
	if _, err := demo.Create(filepath.Join(models, "demo"), demo.DefaultOptions()); err != nil {
		t.Fatal(err)
	}
	ms := threeMembers(t)
	var nodes []*clusterNode
	for _, m := range ms {
		run, err := runner.New(runner.Config{ModelsDir: models, Threads: 1, MaxTokens: 512})
		if err != nil {
			t.Fatal(err)
		}
		st := raftstore.New(m, raftstore.Options{})
		h := openclaw.New(openclaw.Config{Engine: run, Store: st, OpenAI: openai.Options{MaxTokens: 512}})
		r := chi.NewRouter()
		h.Mount(r)
		n := &clusterNode{member: m, store: st, h: h, srv: httptest.NewServer(r), run: run}
		t.Cleanup(n.kill)
		nodes = append(nodes, n)
	}
	return nodes
}

func post(t *testing.T, n *clusterNode, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	req, _ := http.NewRequest(method, n.srv.URL+path, rd)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

func must(t *testing.T, what string, n *clusterNode, method, path string, body any) map[string]any {
	t.Helper()
	status, res := post(t, n, method, path, body)
	if status != 200 {
		t.Fatalf("%s: %d %v", what, status, res)
	}
	return res
}

type sseEvent struct {
	name string
	data map[string]any
}

func stream(t *testing.T, n *clusterNode, id string) <-chan sseEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", n.srv.URL+"/v1/openclaw/agent/stream/"+id, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", resp, err)
	}
	ch := make(chan sseEvent, 256)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var name string
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				name = v
			} else if v, ok := strings.CutPrefix(line, "data: "); ok {
				var d map[string]any
				_ = json.Unmarshal([]byte(v), &d)
				if name != openclaw.EventHeartbeat {
					ch <- sseEvent{name, d}
				}
			}
		}
	}()
	return ch
}

func expect(t *testing.T, ch <-chan sseEvent, names ...string) []sseEvent {
	t.Helper()
	var got []sseEvent
	for _, want := range names {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("stream ended; want %v, got %v", names, got)
			}
			got = append(got, ev)
			if ev.name != want {
				t.Fatalf("events %v, want %v", got, names)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no %s within 20 s (got %v)", want, got)
		}
	}
	return got
}

// TestClusterAgentFlow: the Typical Agent Flow on a three-node Raft
// cluster, each step on another node, the stream open on a follower
// showing every event in order; then the node that created the session
// (the leader) is killed, and the session, its history and its turn
// count are intact on the survivors, where the next turn succeeds.
func TestClusterAgentFlow(t *testing.T) {
	nodes := startCluster(t)
	var leader *clusterNode
	var followers []*clusterNode
	for _, n := range nodes {
		if n.member.IsLeader() {
			leader = n
		} else {
			followers = append(followers, n)
		}
	}
	if leader == nil || len(followers) != 2 {
		t.Fatal("no single leader")
	}
	f1, f2 := followers[0], followers[1]

	created := must(t, "create on the leader", leader, "POST", "/v1/openclaw/agent/sessions", map[string]any{
		"model": "demo", "system_prompt": "You know the weather.",
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}},
	})
	id := created["session_id"].(string)
	// The follower's state machine may lag the create by a moment.
	var ev <-chan sseEvent
	for deadline := time.Now().Add(5 * time.Second); ; {
		if status, _ := post(t, f1, "GET", "/v1/openclaw/agent/sessions/"+id, nil); status == 200 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	ev = stream(t, f1, id)
	expect(t, ev, openclaw.EventConnected, openclaw.EventSessionState)

	res := must(t, "turn on f2", f2, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": "What's the weather in Tokyo?"}}, "max_tokens": 16, "seed": 1,
	})
	evs := expect(t, ev, openclaw.EventTurnStart, openclaw.EventTurnEnd)
	if evs[1].data["content"] != res["content"] {
		t.Fatalf("turn_end on f1 %v, answer on f2 %v", evs[1].data, res)
	}
	must(t, "steer on the leader", leader, "POST", "/v1/openclaw/agent/steer", map[string]any{"session_id": id, "mode": "replace",
		"message": map[string]any{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{"id": "call_1", "type": "function",
			"function": map[string]any{"name": "get_weather", "arguments": `{"city":"Tokyo"}`}}}}})
	expect(t, ev, openclaw.EventSessionState)
	must(t, "tool result on f1", f1, "POST", "/v1/openclaw/agent/tool-results", map[string]any{"session_id": id, "tool_call_id": "call_1", "result": "22C, sunny"})
	evs = expect(t, ev, openclaw.EventToolResult)
	if evs[0].data["tool_call_id"] != "call_1" {
		t.Fatalf("tool_result %v", evs[0].data)
	}
	res = must(t, "final turn on f2", f2, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{"max_tokens": 16, "seed": 2})
	evs = expect(t, ev, openclaw.EventTurnStart, openclaw.EventTurnEnd)
	if evs[1].data["content"] != res["content"] || evs[1].data["turn"] != 2.0 {
		t.Fatalf("turn_end %v, answer %v", evs[1].data, res)
	}
	before := must(t, "get on f1", f1, "GET", "/v1/openclaw/agent/sessions/"+id, nil)

	// Kill the creator, which is the leader.
	leader.kill()
	waitLeader(t, f1.member, f2.member)
	after := must(t, "get on f2 after the kill", f2, "GET", "/v1/openclaw/agent/sessions/"+id, nil)
	bm, _ := json.Marshal(before["messages"])
	am, _ := json.Marshal(after["messages"])
	if after["turn_count"] != 2.0 || string(am) != string(bm) || after["system_prompt"] != "You know the weather." {
		t.Fatalf("session after the leader died %v, before %v", after, before)
	}
	res = must(t, "turn on f2 after the kill", f2, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": "And tomorrow?"}}, "max_tokens": 8,
	})
	if res["turn"] != 3.0 {
		t.Fatalf("turn after the kill %v", res)
	}
	expect(t, ev, openclaw.EventTurnStart, openclaw.EventTurnEnd)
	if s := must(t, "get on f1", f1, "GET", "/v1/openclaw/agent/sessions/"+id, nil); s["turn_count"] != 3.0 || s["message_count"] != 6.0 {
		t.Fatalf("session %v", s)
	}
	must(t, "delete on f1", f1, "DELETE", "/v1/openclaw/agent/sessions/"+id, nil)
	evs = expect(t, ev, openclaw.EventSessionClosed)
	if evs[0].data["reason"] != "deleted" {
		t.Fatalf("session_closed %v", evs[0].data)
	}
}
