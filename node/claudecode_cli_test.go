package node_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"fusion/engine/demo"
	"fusion/internal/testenv"
	"fusion/node"
	"fusion/node/nodetest"
)

// claudeCodeVersion is the Claude Code CLI that scripts/test-deps.sh
// installs (npm @anthropic-ai/claude-code, pinned there too).
const claudeCodeVersion = "2.1.328"

// claudeBin returns the pinned Claude Code CLI from $FUSION_NODE_MODULES,
// else .cache/node/node_modules. Missing, it fails the test under
// FUSION_REQUIRE_FIXTURES=1 and skips it otherwise.
func claudeBin(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("FUSION_NODE_MODULES")
	if dir == "" {
		root, _ := filepath.Abs("..")
		dir = filepath.Join(root, ".cache", "node", "node_modules")
	}
	bin := filepath.Join(dir, ".bin", "claude")
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), claudeCodeVersion+" ") {
		msg := "the Claude Code CLI %s is not installed at %s (%v: %s)"
		if testenv.Required() {
			t.Fatalf(msg, claudeCodeVersion, bin, err, out)
		}
		t.Skipf(msg+" (run `make test`, which installs it)", claudeCodeVersion, bin, err, out)
	}
	return bin
}

// exchange is one request a client sent through a recorder and the answer
// it got.
type exchange struct {
	method, path string
	query        url.Values
	body         map[string]any
	status       int
	servedBy     string // X-Fusion-Node
	response     []byte
}

// recorder is a reverse proxy in front of a node that keeps every
// exchange.
type recorder struct {
	mu        sync.Mutex
	exchanges []exchange
}

func startRecorder(t *testing.T, upstream string) (*recorder, string) {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.FlushInterval = -1 // streams pass as they come
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(raw))
		r.Header.Del("Accept-Encoding") // keep the recorded answer readable
		cw := &captureWriter{ResponseWriter: w}
		proxy.ServeHTTP(cw, r)
		ex := exchange{method: r.Method, path: r.URL.Path, query: r.URL.Query(), status: cw.status,
			servedBy: cw.Header().Get("X-Fusion-Node"), response: cw.buf.Bytes()}
		_ = json.Unmarshal(raw, &ex.body)
		rec.mu.Lock()
		rec.exchanges = append(rec.exchanges, ex)
		rec.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

func (rec *recorder) all() []exchange {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.exchanges)
}

// captureWriter keeps a copy of the answer it passes on.
type captureWriter struct {
	http.ResponseWriter
	status int
	buf    bytes.Buffer
}

func (c *captureWriter) WriteHeader(code int) {
	c.status = code
	c.ResponseWriter.WriteHeader(code)
}

func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	c.buf.Write(b)
	return c.ResponseWriter.Write(b)
}

func (c *captureWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// claudeCodeModels writes a demo model whose answers end on their own after
// about 30 tokens (demo StopAfter: the end token is reached through the
// weights, as a real model's is) with an 8192-token window, so a session
// gets real text back, ended by end_turn, and never runs into the window.
func claudeCodeModels(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	o := demo.DefaultOptions()
	o.StopAfter = 30
	if _, err := demo.Create(filepath.Join(dir, nodetest.Model), o); err != nil {
		t.Fatalf("demo model: %v", err)
	}
	nodetest.EditModelJSON(t, dir, nodetest.Model, "config.json", map[string]any{"max_position_embeddings": 8192})
	return dir
}

// cliResult is the JSON document of `claude -p --output-format json`.
type cliResult struct {
	Type     string `json:"type"`
	Subtype  string `json:"subtype"`
	IsError  bool   `json:"is_error"`
	NumTurns int    `json:"num_turns"`
	Result   string `json:"result"`
}

// runClaude runs one print-mode session of the real CLI against baseURL,
// with a throwaway home and nothing else to talk to.
func runClaude(t *testing.T, bin, baseURL, key string) cliResult {
	t.Helper()
	home, work := t.TempDir(), t.TempDir()
	ctx, cancel := testenv.ClientContext(t)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-p", "Say hi", "--model", nodetest.Model, "--max-turns", "1",
		"--output-format", "json", "--no-session-persistence",
		// A short system prompt and one tool keep the prompt near 4k
		// tokens (the default one is ~29k with the demo's tokenizer).
		"--system-prompt", "You are a terse assistant.", "--tools", "Bash")
	cmd.Dir = work
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home, "CLAUDE_CONFIG_DIR=" + filepath.Join(home, ".claude"),
		"ANTHROPIC_BASE_URL=" + baseURL, "ANTHROPIC_API_KEY=" + key,
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_TELEMETRY=1", "DISABLE_AUTOUPDATER=1",
		"DISABLE_ERROR_REPORTING=1",
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("claude -p took %v; stderr: %s", time.Since(start).Round(time.Millisecond), stderr.String())
	if err != nil {
		t.Fatalf("claude -p: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	if strings.Contains(strings.ToLower(stdout.String()+stderr.String()), "api error") {
		t.Errorf("the CLI reports an API error:\nstdout: %s\nstderr: %s", stdout.String(), stderr.String())
	}
	var res cliResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("the CLI's output is not its JSON result (%v): %s", err, stdout.String())
	}
	if res.Type != "result" || res.Subtype != "success" || res.IsError {
		t.Errorf("the session did not succeed: %s", stdout.String())
	}
	return res
}

// sseStopReasons returns the event names of a streamed answer and the
// stop_reason of its message_delta.
func sseStopReason(t *testing.T, body []byte) (names []string, stop string) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			names = append(names, name)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(data, `"message_delta"`) {
			var d struct {
				Delta struct {
					StopReason string `json:"stop_reason"`
				} `json:"delta"`
			}
			if err := json.Unmarshal([]byte(data), &d); err != nil {
				t.Fatalf("message_delta: %v", err)
			}
			stop = d.Delta.StopReason
		}
	}
	return names, stop
}

// TestClaudeCodeCLI runs the real Claude Code CLI in print mode against a
// node, and against the forwarding node of a two-node cluster, through a
// recording proxy: the session succeeds, and the requests it sent are the
// ones current Claude Code sends (system entries in messages, adaptive
// thinking, context_management, ?beta=true, 32000 max_tokens, tools,
// streaming), each answered 200 with a whole stream.
func TestClaudeCodeCLI(t *testing.T) {
	bin := claudeBin(t)
	const key = "k"
	tests := []struct {
		name     string
		start    func(t *testing.T) *node.Node // the node the CLI talks to
		servedBy string
	}{
		{"single node", func(t *testing.T) *node.Node {
			return nodetest.Start(t, nodetest.Options{APIKey: key, ModelsDir: claudeCodeModels(t)})
		}, ""},
		{"forwarding node of a cluster", func(t *testing.T) *node.Node {
			a := nodetest.Start(t, nodetest.Options{APIKey: key, ModelsDir: claudeCodeModels(t), Cluster: nodetest.Member("a", 1, nil)})
			b := nodetest.Start(t, nodetest.Options{APIKey: key, ModelsDir: t.TempDir(), Cluster: nodetest.Member("b", 0, []string{a.Cluster().GossipAddr()})})
			waitForwarded(t, b, key, "a")
			return b
		}, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := tt.start(t)
			rec, proxyURL := startRecorder(t, n.URL())
			res := runClaude(t, bin, proxyURL, key)
			exchanges := rec.all()
			t.Logf("%d requests, %d turns, result %q", len(exchanges), res.NumTurns, res.Result)
			if len(exchanges) == 0 {
				t.Fatal("the CLI sent no request")
			}
			if strings.TrimSpace(res.Result) == "" {
				t.Errorf("the session's answer is empty; the model writes about 30 tokens before its end token")
			}
			countTokens := 0
			for i, ex := range exchanges {
				if ex.path == "/v1/messages/count_tokens" {
					countTokens++
				}
				if ex.method != http.MethodPost || ex.path != "/v1/messages" || ex.query.Get("beta") != "true" {
					t.Errorf("request %d: %s %s?%s, want POST /v1/messages?beta=true", i, ex.method, ex.path, ex.query.Encode())
					continue
				}
				if ex.status != http.StatusOK || (tt.servedBy != "" && ex.servedBy != tt.servedBy) {
					t.Errorf("request %d: status %d served by %q; want 200 from %q: %s", i, ex.status, ex.servedBy, tt.servedBy, ex.response)
					continue
				}
				checkClaudeCodeBody(t, i, ex.body)
				names, stop := sseStopReason(t, ex.response)
				if len(names) == 0 || names[0] != "message_start" || names[len(names)-1] != "message_stop" || stop != "end_turn" {
					t.Errorf("request %d: stream %v, stop_reason %q; want message_start … message_stop, end_turn", i, names, stop)
				}
			}
			// Claude Code 2.1.328 in print mode counts no tokens.
			if countTokens != 0 {
				t.Errorf("%d count_tokens calls; this version made none when recorded", countTokens)
			}
		})
	}
}

// checkClaudeCodeBody checks a recorded /v1/messages body against what
// Claude Code 2.1.328 sends.
func checkClaudeCodeBody(t *testing.T, i int, b map[string]any) {
	t.Helper()
	if b["stream"] != true || b["max_tokens"] != float64(32000) || b["model"] != nodetest.Model {
		t.Errorf("request %d: stream %v, max_tokens %v, model %v; want true, 32000, %s", i, b["stream"], b["max_tokens"], b["model"], nodetest.Model)
	}
	if tools := fieldOfEach(b["tools"], "name"); !slices.Contains(tools, "Bash") {
		t.Errorf("request %d: tools %v, want Bash among them", i, tools)
	}
	if roles := fieldOfEach(b["messages"], "role"); !slices.Contains(roles, "system") {
		t.Errorf("request %d: message roles %v; Claude Code sends a system entry in messages", i, roles)
	}
	thinking, _ := b["thinking"].(map[string]any)
	if thinking["type"] != "adaptive" {
		t.Errorf("request %d: thinking %v, want adaptive", i, b["thinking"])
	}
	for _, field := range []string{"context_management", "output_config", "metadata", "system"} {
		if _, ok := b[field]; !ok {
			t.Errorf("request %d: no %s", i, field)
		}
	}
}

// fieldOfEach returns the string field key of each object in list, a
// decoded JSON array.
func fieldOfEach(list any, key string) []string {
	items, _ := list.([]any)
	out := make([]string, 0, len(items))
	for _, x := range items {
		obj, _ := x.(map[string]any)
		v, _ := obj[key].(string)
		out = append(out, v)
	}
	return out
}

// waitForwarded waits until n forwards a request for the demo model to
// the member named servedBy.
func waitForwarded(t *testing.T, n *node.Node, key, servedBy string) {
	t.Helper()
	body := `{"model":"` + nodetest.Model + `","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodPost, n.URL()+"/v1/messages", strings.NewReader(body))
		req.Header.Set("x-api-key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && resp.Header.Get("X-Fusion-Node") == servedBy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node never forwarded to %s: last status %d, served by %q", servedBy, resp.StatusCode, resp.Header.Get("X-Fusion-Node"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
