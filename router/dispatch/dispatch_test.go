package dispatch_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"fusion/cluster/remote"
	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/demo"
	"fusion/engine/demo/demotest"
	"fusion/engine/runner"
	"fusion/engine/sample"
	"fusion/router"
	"fusion/router/dispatch"
	"fusion/router/servedby"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newRunner starts the real engine; with withDemo it serves the demo model
// "demo" (the same weights on every node), else nothing.
func newRunner(t testing.TB, withDemo bool) *runner.Runner {
	t.Helper()
	dir := t.TempDir()
	if withDemo {
		demotest.Create(t, filepath.Join(dir, "demo"), demo.Options{Arch: "qwen3", Seed: 7}) // built once per test binary
	}
	r, err := runner.New(runner.Config{ModelsDir: dir, Threads: 1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// upstream wraps a peer's engine: it counts the generations it admits,
// can hold every event after the first until released, and reports when
// each generation really stopped.
type upstream struct {
	engine.Generator
	calls atomic.Int64
	gate  chan struct{} // nil: no gate
	// holdAll holds the first event too (a peer still in prefill).
	holdAll bool
	stopped chan time.Time
}

func newUpstream(g engine.Generator, gated bool) *upstream {
	u := &upstream{Generator: g, stopped: make(chan time.Time, 64)}
	if gated {
		u.gate = make(chan struct{})
	}
	return u
}

func (u *upstream) Generate(ctx context.Context, req *engine.Request) (<-chan engine.Event, error) {
	in, err := u.Generator.Generate(ctx, req)
	if err != nil {
		return nil, err
	}
	u.calls.Add(1)
	out := make(chan engine.Event)
	go func() {
		defer func() { u.stopped <- time.Now() }()
		defer close(out)
		first := true
		for ev := range in {
			if (!first || u.holdAll) && u.gate != nil {
				select {
				case <-u.gate:
				case <-ctx.Done():
					for range in {
					}
					return
				}
			}
			first = false
			select {
			case out <- ev:
			case <-ctx.Done():
				for range in {
				}
				return
			}
		}
	}()
	return out, nil
}

// peer is a node's Engine service on a loopback port.
type peer struct {
	id  string
	up  *upstream
	srv *remote.Server
}

func startPeer(t testing.TB, id string, gated bool) *peer {
	t.Helper()
	up := newUpstream(newRunner(t, true), gated)
	return &peer{id: id, up: up, srv: serveEngine(t, remote.ServerConfig{NodeID: id, Engine: up, Logger: quiet})}
}

// serveEngine serves an Engine service on a loopback port until the test
// ends.
func serveEngine(t testing.TB, cfg remote.ServerConfig) *remote.Server {
	t.Helper()
	srv, err := remote.Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Stop(ctx)
	})
	return srv
}

func (p *peer) entry(load int64) dispatch.Peer {
	return dispatch.Peer{ID: p.id, Addr: p.srv.Addr(), Alive: true, Load: load}
}

// table is a routing table the test writes by hand (the cluster's real one
// is fed by Raft and memberlist).
type table struct {
	self  string
	mu    sync.Mutex
	ready map[string][]dispatch.Peer
	known map[string]bool
	peers []dispatch.Peer
	// unheard are the peers whose inventory the table has not heard.
	unheard []dispatch.Peer
}

func (t *table) Self() string { return t.self }
func (t *table) Candidates(model string) []dispatch.Peer {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]dispatch.Peer(nil), t.ready[model]...)
}
func (t *table) Known(model string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.known[model] || len(t.ready[model]) > 0
}
func (t *table) Peers() []dispatch.Peer {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]dispatch.Peer(nil), t.peers...)
}
func (t *table) Unheard() []dispatch.Peer {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]dispatch.Peer(nil), t.unheard...)
}

// frontend is a node's HTTP frontend over a dispatcher; its own engine has
// no model unless local is given.
type frontend struct {
	url  string
	disp *dispatch.Dispatcher
}

func startFrontend(t testing.TB, tbl *table, local engine.Generator) *frontend {
	t.Helper()
	if local == nil {
		local = newRunner(t, false)
	}
	pool := remote.NewPool()
	t.Cleanup(func() { pool.Close() })
	d := dispatch.New(dispatch.Config{Local: local, Table: tbl, Connect: pool, Logger: quiet})
	srv := httptest.NewServer(router.New(router.Config{Engine: d, Logger: quiet, Version: "test"}))
	t.Cleanup(srv.Close)
	return &frontend{url: srv.URL, disp: d}
}

// freeAddr is a loopback address nobody listens on.
func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func chatBody(content string, maxTokens int, stream bool) string {
	return fmt.Sprintf(`{"model":"demo","messages":[{"role":"user","content":%q}],"max_tokens":%d,"temperature":0,"stream":%v}`, content, maxTokens, stream)
}

func post(t testing.TB, ctx context.Context, url, body string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// sse reads the data lines of a stream, with a deadline per line.
type sse struct {
	t     testing.TB
	lines chan string
}

func readSSE(t testing.TB, body io.Reader) *sse {
	s := &sse{t: t, lines: make(chan string, 1024)}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				s.lines <- d
			}
		}
	}()
	return s
}

func (s *sse) next() (string, bool) {
	s.t.Helper()
	select {
	case l, ok := <-s.lines:
		return l, ok
	case <-time.After(10 * time.Second):
		s.t.Fatal("no SSE event within 10 s")
		return "", false
	}
}

func (s *sse) rest() []string {
	var all []string
	for {
		l, ok := s.next()
		if !ok {
			return all
		}
		all = append(all, l)
	}
}

// TestFirstEventThroughForwarder: the first SSE event reaches the client
// through a forwarding node while the upstream is still held, and the
// answer names the node that ran it.
func TestFirstEventThroughForwarder(t *testing.T) {
	b := startPeer(t, "node-b", true)
	fe := startFrontend(t, &table{self: "node-a", ready: map[string][]dispatch.Peer{"demo": {b.entry(0)}}}, nil)

	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", chatBody("Hello", 20, true)},
		{"/v1/messages", `{"model":"demo","max_tokens":20,"temperature":0,"stream":true,"messages":[{"role":"user","content":"Hello"}]}`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			b.up.gate = make(chan struct{})
			resp := post(t, context.Background(), fe.url+tc.path, tc.body)
			defer resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get(servedby.Header) != "node-b" {
				t.Fatalf("status %d, %s %q", resp.StatusCode, servedby.Header, resp.Header.Get(servedby.Header))
			}
			s := readSSE(t, resp.Body)
			first, ok := s.next()
			if !ok {
				t.Fatal("stream ended before the first event")
			}
			if len(b.up.stopped) != 0 {
				t.Fatal("the upstream finished before the gate opened")
			}
			close(b.up.gate) // now let the upstream finish
			all := append([]string{first}, s.rest()...)
			last := all[len(all)-1]
			if tc.path == "/v1/chat/completions" && last != "[DONE]" {
				t.Errorf("last event %q", last)
			}
			if tc.path == "/v1/messages" && !strings.Contains(last, "message_stop") {
				t.Errorf("last event %q", last)
			}
			<-b.up.stopped
		})
	}
}

// TestClientCancelStopsRemote: a client that goes away stops the
// generation on the peer within 200 ms.
func TestClientCancelStopsRemote(t *testing.T) {
	b := startPeer(t, "node-b", false)
	fe := startFrontend(t, &table{self: "node-a", ready: map[string][]dispatch.Peer{"demo": {b.entry(0)}}}, nil)
	var worst time.Duration
	for i := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		resp := post(t, ctx, fe.url+"/v1/chat/completions", chatBody("Hello", 4000, true))
		s := readSSE(t, resp.Body)
		for range 3 {
			if _, ok := s.next(); !ok {
				t.Fatal("stream ended early")
			}
		}
		start := time.Now()
		cancel()
		select {
		case at := <-b.up.stopped:
			took := at.Sub(start)
			worst = max(worst, took)
			t.Logf("run %d: the peer's generation stopped %v after the client went away", i, took)
		case <-time.After(5 * time.Second):
			t.Fatal("the peer still generates 5 s after the client went away")
		}
		resp.Body.Close()
	}
	if worst > 200*time.Millisecond {
		t.Errorf("the remote generation stopped %v after the cancel, want < 200ms", worst)
	}
}

// TestRefusedPeerRetried: a peer that refuses the connection is skipped
// for the next candidate before anything is sent.
func TestRefusedPeerRetried(t *testing.T) {
	b := startPeer(t, "node-b", false)
	dead := dispatch.Peer{ID: "node-dead", Addr: freeAddr(t), Alive: true}
	// node-b looks busy, so the ring tries node-dead first.
	fe := startFrontend(t, &table{self: "node-a", ready: map[string][]dispatch.Peer{"demo": {dead, b.entry(100)}}}, nil)
	resp := post(t, context.Background(), fe.url+"/v1/chat/completions", chatBody("Hello", 5, false))
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get(servedby.Header) != "node-b" {
		t.Fatalf("status %d node %q: %s", resp.StatusCode, resp.Header.Get(servedby.Header), body)
	}
	if st := fe.disp.Stats(); st.Retried != 1 || st.Forwarded != 1 {
		t.Errorf("dispatcher stats %+v, want 1 retry and 1 forward", st)
	}
	// Every candidate refused: 503 with a retry hint, in OpenAI's shape.
	fe2 := startFrontend(t, &table{self: "node-a", ready: map[string][]dispatch.Peer{"demo": {dead}}}, nil)
	resp2 := post(t, context.Background(), fe2.url+"/v1/chat/completions", chatBody("Hello", 5, false))
	defer resp2.Body.Close()
	var e struct{ Error struct{ Code string } }
	json.NewDecoder(resp2.Body).Decode(&e)
	if resp2.StatusCode != 503 || resp2.Header.Get("Retry-After") == "" || e.Error.Code != "model_unavailable" {
		t.Errorf("all refused: %d Retry-After %q code %q", resp2.StatusCode, resp2.Header.Get("Retry-After"), e.Error.Code)
	}
}

// TestPeerDiesAfterFirstEvent: once the first event is out, a peer that
// dies is not retried: the client sees an error event and no [DONE].
func TestPeerDiesAfterFirstEvent(t *testing.T) {
	b := startPeer(t, "node-b", true)
	c := startPeer(t, "node-c", false)
	// node-c looks busy, so node-b is first.
	fe := startFrontend(t, &table{self: "node-a", ready: map[string][]dispatch.Peer{"demo": {b.entry(0), c.entry(100)}}}, nil)
	resp := post(t, context.Background(), fe.url+"/v1/chat/completions", chatBody("Hello", 50, true))
	defer resp.Body.Close()
	if resp.Header.Get(servedby.Header) != "node-b" {
		t.Fatalf("served by %q", resp.Header.Get(servedby.Header))
	}
	s := readSSE(t, resp.Body)
	if _, ok := s.next(); !ok {
		t.Fatal("no first event")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b.srv.Stop(ctx) // the peer dies: calls are cut
	rest := s.rest()
	if len(rest) == 0 || !strings.Contains(rest[len(rest)-1], `"error"`) {
		t.Fatalf("after the peer died: %q, want an error event last", rest)
	}
	for _, l := range rest {
		if l == "[DONE]" {
			t.Error("a truncated stream ended with [DONE]")
		}
	}
	if n := c.up.calls.Load(); n != 0 {
		t.Errorf("node-c got %d generations: retried after the first event", n)
	}
	if st := fe.disp.Stats(); st.Retried != 0 {
		t.Errorf("dispatcher stats %+v, want no retry", st)
	}
}

// TestPeerDiesBeforeFirstEvent: a peer that admitted the request but dies
// before sending anything is replaced by the next node, and the client
// gets a whole answer from it.
func TestPeerDiesBeforeFirstEvent(t *testing.T) {
	b := startPeer(t, "node-b", true)
	b.up.holdAll = true
	c := startPeer(t, "node-c", false)
	fe := startFrontend(t, &table{self: "node-a", ready: map[string][]dispatch.Peer{"demo": {b.entry(0), c.entry(100)}}}, nil)
	go func() {
		for fe.disp.Stats().Forwarded == 0 { // admitted on node-b, held before its first event
			time.Sleep(time.Millisecond)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		b.srv.Stop(ctx)
	}()
	resp := post(t, context.Background(), fe.url+"/v1/chat/completions", chatBody("Hello", 8, true))
	defer resp.Body.Close()
	all := readSSE(t, resp.Body).rest()
	if resp.StatusCode != 200 || resp.Header.Get(servedby.Header) != "node-c" || len(all) == 0 || all[len(all)-1] != "[DONE]" {
		t.Fatalf("status %d, served by %q, events %q", resp.StatusCode, resp.Header.Get(servedby.Header), all)
	}
	if st := fe.disp.Stats(); st.Retried != 1 || st.Forwarded != 2 || b.up.calls.Load() != 1 || c.up.calls.Load() != 1 {
		t.Errorf("stats %+v, calls b %d c %d", st, b.up.calls.Load(), c.up.calls.Load())
	}
}

// TestForwardedSameAsDirect: greedy answers are the same from the node
// that has the model and through a node that forwards to it.
func TestForwardedSameAsDirect(t *testing.T) {
	b := startPeer(t, "node-b", false)
	fe := startFrontend(t, &table{self: "node-a", ready: map[string][]dispatch.Peer{"demo": {b.entry(0)}}}, nil)
	direct := httptest.NewServer(router.New(router.Config{Engine: b.up.Generator, Logger: quiet, Version: "test"}))
	defer direct.Close()

	for _, tc := range []struct{ path, body, field string }{
		{"/v1/chat/completions", chatBody("Tell me a story", 24, false), "choices"},
		{"/v1/completions", `{"model":"demo","prompt":"Once upon","max_tokens":16,"temperature":0,"logprobs":2}`, "choices"},
		{"/v1/messages", `{"model":"demo","max_tokens":24,"temperature":0,"messages":[{"role":"user","content":"Tell me a story"}]}`, "content"},
		{"/tokenize", `{"model":"demo","messages":[{"role":"user","content":"hi"}]}`, "tokens"},
		{"/v1/messages/count_tokens", `{"model":"demo","messages":[{"role":"user","content":"hi"}]}`, "input_tokens"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			get := func(url string) (string, string) {
				resp := post(t, context.Background(), url+tc.path, tc.body, "anthropic-version", "2023-06-01")
				defer resp.Body.Close()
				var m map[string]json.RawMessage
				if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != 200 {
					t.Fatalf("%s: %d %v %s", url, resp.StatusCode, err, m)
				}
				return string(m[tc.field]), resp.Header.Get(servedby.Header)
			}
			want, _ := get(direct.URL)
			got, node := get(fe.url)
			if got != want || want == "" {
				t.Errorf("forwarded %s:\n%s\ndirect:\n%s", tc.field, got, want)
			}
			if strings.HasPrefix(tc.path, "/v1/") && !strings.Contains(tc.path, "count") && node != "node-b" {
				t.Errorf("served by %q", node)
			}
		})
	}
}

// TestLocalAndMissing: a model ready here runs here; a model nowhere ready
// is a 503 with Retry-After when the cluster knows it, else a 404.
func TestLocalAndMissing(t *testing.T) {
	b := startPeer(t, "node-b", false)
	tbl := &table{self: "node-a", known: map[string]bool{"cold": true}}
	tbl.ready = map[string][]dispatch.Peer{"demo": {b.entry(0), {ID: "node-a", Alive: true}}}
	tbl.peers = []dispatch.Peer{b.entry(0)}
	fe := startFrontend(t, tbl, newRunner(t, true))

	resp := post(t, context.Background(), fe.url+"/v1/chat/completions", chatBody("Hello", 3, false))
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get(servedby.Header) != "node-a" || b.up.calls.Load() != 0 {
		t.Errorf("model ready here: %d, served by %q, peer calls %d", resp.StatusCode, resp.Header.Get(servedby.Header), b.up.calls.Load())
	}
	for _, tc := range []struct {
		model, code string
		status      int
	}{{"cold", "model_unavailable", 503}, {"nope", "model_not_found", 404}} {
		resp := post(t, context.Background(), fe.url+"/v1/chat/completions", strings.Replace(chatBody("Hello", 3, false), `"demo"`, `"`+tc.model+`"`, 1))
		var e struct{ Error struct{ Code string } }
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != tc.status || e.Error.Code != tc.code || (tc.status == 503) != (resp.Header.Get("Retry-After") != "") {
			t.Errorf("%s: %d %q Retry-After %q", tc.model, resp.StatusCode, e.Error.Code, resp.Header.Get("Retry-After"))
		}
	}

	// The model list merges this node's and the peers'.
	resp, err := http.Get(fe.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct{ Data []struct{ ID string } }
	json.NewDecoder(resp.Body).Decode(&list)
	if len(list.Data) != 1 || list.Data[0].ID != "demo" {
		t.Errorf("models %+v", list.Data)
	}
}

// TestSolo: a lone node serves everything locally and names itself.
func TestSolo(t *testing.T) {
	d := dispatch.New(dispatch.Config{Local: newRunner(t, true), Table: dispatch.Solo("only"), Logger: quiet})
	srv := httptest.NewServer(router.New(router.Config{Engine: d, Logger: quiet}))
	defer srv.Close()
	for model, want := range map[string]int{"demo": 200, "nope": 404} {
		resp := post(t, context.Background(), srv.URL+"/v1/chat/completions", strings.Replace(chatBody("Hi", 2, false), `"demo"`, `"`+model+`"`, 1))
		resp.Body.Close()
		if resp.StatusCode != want || (want == 200) != (resp.Header.Get(servedby.Header) == "only") {
			t.Errorf("%s: %d, served by %q", model, resp.StatusCode, resp.Header.Get(servedby.Header))
		}
	}
}

// TestSessionAffinity: requests of one session go to one node whatever
// their prompt, and two frontends agree on it.
func TestSessionAffinity(t *testing.T) {
	peers := []*peer{startPeer(t, "node-b", false), startPeer(t, "node-c", false), startPeer(t, "node-d", false)}
	ready := map[string][]dispatch.Peer{}
	for _, p := range peers {
		ready["demo"] = append(ready["demo"], p.entry(0))
	}
	fe1 := startFrontend(t, &table{self: "fe-1", ready: ready}, nil)
	fe2 := startFrontend(t, &table{self: "fe-2", ready: ready}, nil)

	servedBy := map[string]map[string]bool{} // session → nodes
	for i := range 12 {
		session := fmt.Sprintf("session-%d", i%4)
		fe := []*frontend{fe1, fe2}[i%2]
		resp := post(t, context.Background(), fe.url+"/v1/chat/completions", chatBody(fmt.Sprintf("prompt %d", i), 1, false), dispatch.SessionHeader, session)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if servedBy[session] == nil {
			servedBy[session] = map[string]bool{}
		}
		servedBy[session][resp.Header.Get(servedby.Header)] = true
	}
	for s, nodes := range servedBy {
		if len(nodes) != 1 {
			t.Errorf("%s ran on %v, want one node", s, nodes)
		}
	}

	// The same prompt prefix without a session goes to one node too.
	req := &engine.Request{Model: "demo", Sampling: sample.DefaultParams(),
		Messages: []*chattemplate.Object{chattemplate.NewObject("role", "system", "content", strings.Repeat("a long system prompt ", 80)),
			chattemplate.NewObject("role", "user", "content", "x")}}
	k1 := fe1.disp.Key(context.Background(), req)
	req.Messages[1].Set("content", "a different question after the same long prefix")
	if k2 := fe2.disp.Key(context.Background(), req); k1 != k2 {
		t.Error("the same long prefix gave two keys")
	}
	if k3 := fe1.disp.Key(dispatch.WithSession(context.Background(), "s"), req); k3 == k1 {
		t.Error("a session id did not change the key")
	}
}

// silentAddr is a loopback address that accepts connections and never
// answers: a peer that hangs.
func silentAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// TestUnheardPeers: a model the table does not know is not a definitive
// 404 while some peer's inventory is unheard. The dispatcher asks those
// peers (for at most PeerTimeout): one that has the model serves it; when
// all answer without it, 404; when one that did not answer might have it,
// 503 with Retry-After. With every inventory heard, nobody is asked.
func TestUnheardPeers(t *testing.T) {
	b := startPeer(t, "node-b", false)
	dead := dispatch.Peer{ID: "node-dead", Addr: freeAddr(t), Alive: true}
	silent := dispatch.Peer{ID: "node-silent", Addr: silentAddr(t), Alive: true}
	const peerTimeout = 300 * time.Millisecond
	tests := []struct {
		name, model string
		unheard     []dispatch.Peer
		status      int
		code        string
		servedBy    string
	}{
		{"unheard peer has it", "demo", []dispatch.Peer{b.entry(0)}, 200, "", "node-b"},
		{"one unheard peer has it, one is down", "demo", []dispatch.Peer{dead, b.entry(0)}, 200, "", "node-b"},
		{"unheard peer is down", "demo", []dispatch.Peer{dead}, 503, "model_unavailable", ""},
		{"unheard peer hangs", "demo", []dispatch.Peer{silent}, 503, "model_unavailable", ""},
		{"unheard peers answer without it", "nope", []dispatch.Peer{b.entry(0)}, 404, "model_not_found", ""},
		{"an unheard peer that may have it is down", "nope", []dispatch.Peer{b.entry(0), dead}, 503, "model_unavailable", ""},
		{"every inventory heard", "nope", nil, 404, "model_not_found", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tbl := &table{self: "node-a", unheard: tc.unheard, peers: append([]dispatch.Peer{b.entry(0)}, tc.unheard...)}
			pool := remote.NewPool()
			t.Cleanup(func() { pool.Close() })
			d := dispatch.New(dispatch.Config{Local: newRunner(t, false), Table: tbl, Connect: pool, PeerTimeout: peerTimeout, Logger: quiet})
			srv := httptest.NewServer(router.New(router.Config{Engine: d, Logger: quiet, Version: "test"}))
			t.Cleanup(srv.Close)

			start := time.Now()
			resp := post(t, context.Background(), srv.URL+"/v1/chat/completions", strings.Replace(chatBody("Hello", 3, false), `"demo"`, `"`+tc.model+`"`, 1))
			took := time.Since(start)
			var e struct{ Error struct{ Code string } }
			json.NewDecoder(resp.Body).Decode(&e)
			resp.Body.Close()
			if resp.StatusCode != tc.status || e.Error.Code != tc.code || resp.Header.Get(servedby.Header) != tc.servedBy {
				t.Errorf("chat: %d %q served by %q; want %d %q served by %q",
					resp.StatusCode, e.Error.Code, resp.Header.Get(servedby.Header), tc.status, tc.code, tc.servedBy)
			}
			if (tc.status == 503) != (resp.Header.Get("Retry-After") != "") {
				t.Errorf("Retry-After %q on a %d", resp.Header.Get("Retry-After"), resp.StatusCode)
			}
			if tc.status == 503 && took > 20*peerTimeout {
				t.Errorf("the answer took %v: asking is not bounded by PeerTimeout (%v)", took, peerTimeout)
			}

			// Token counting settles the same way.
			resp = post(t, context.Background(), srv.URL+"/tokenize", `{"model":"`+tc.model+`","prompt":"Hello"}`)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Errorf("tokenize: %d, want %d", resp.StatusCode, tc.status)
			}
		})
	}
}
