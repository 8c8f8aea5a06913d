package node_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ant "github.com/anthropics/anthropic-sdk-go/v2"
	antopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	oa "github.com/openai/openai-go/v3"
	oaopt "github.com/openai/openai-go/v3/option"

	"fusion/engine/backend"
	"fusion/internal/testenv"
	"fusion/node"
	"fusion/node/nodetest"
	"fusion/router/servedby"
)

// The secrets of the cloud tests: none may appear in a log line or an
// admin answer.
const (
	cloudEnvKey   = "sk-oa-test-key-4f1c9a"  // the OpenAI upstream's, from FUSION_TEST_CLOUD_KEY
	upstreamKey   = "up-secret-key-77d2e0"   // the Anthropic upstream's (a fusion node's API key), from a file
	wrongCloudKey = "wrong-cloud-key-3b8a51" // a key the Anthropic upstream refuses, from FUSION_TEST_CLOUD_WRONG
)

// syncBuffer is a log sink for several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startMLXLMServer starts mlx-lm's OpenAI-compatible server (mlx_lm
// server, from the reference venv, on MLX's CPU device) over the demo
// model directory; the function it returns waits until the server is up
// and returns its API root (…/v1). It answers the model "default_model".
// Without mlx-lm the test fails under `make test` and is skipped
// elsewhere.
func startMLXLMServer(t *testing.T, modelDir string) (wait func() string) {
	t.Helper()
	py := testenv.Python(t)
	if err := exec.Command(py, "-c", "import mlx_lm.server").Run(); err != nil {
		if testenv.Required() {
			t.Fatalf("mlx-lm is not importable by %s: %v", py, err)
		}
		t.Skipf("mlx-lm is not importable by %s (run `make test`, which installs it): %v", py, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var out syncBuffer
	cmd := exec.Command(py, "-m", "mlx_lm", "server", "--model", modelDir, "--host", "127.0.0.1", "--port", fmt.Sprint(port))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	root := fmt.Sprintf("http://127.0.0.1:%d", port)
	return func() string { return waitMLXLMServer(t, root, exited, &out) }
}

func waitMLXLMServer(t *testing.T, root string, exited chan error, out *syncBuffer) string {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if resp, err := http.Get(root + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return root + "/v1"
			}
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("mlx_lm server exited: %v\n%s", err, out.String())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("mlx_lm server not up after 3 minutes:\n%s", out.String())
		}
	}
}

// cloudCall posts body to path on url with key; it returns the status, the
// node(s) that served it and the body.
func cloudCall(t *testing.T, method, url, key, body string) (int, string, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("anthropic-version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get(servedby.Header), raw
}

// sseText joins the text deltas of an OpenAI or Anthropic stream and
// reports whether it ended as each dialect ends a stream.
func sseText(raw []byte) (text string, ended bool, usage map[string]any) {
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	var b strings.Builder
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			ended = true
			continue
		}
		var ev struct {
			Type    string
			Choices []struct{ Delta struct{ Content string } }
			Delta   struct{ Text string }
			Usage   map[string]any
		}
		if json.Unmarshal([]byte(line), &ev) != nil {
			continue
		}
		for _, c := range ev.Choices {
			b.WriteString(c.Delta.Content)
		}
		b.WriteString(ev.Delta.Text)
		if ev.Type == "message_stop" {
			ended = true
		}
		if ev.Usage != nil {
			usage = ev.Usage
		}
	}
	return b.String(), ended, usage
}

// stepGate holds a node's forward passes while closed: a generation it
// holds stays admitted, so the node's queue is full for as long as a test
// needs.
type stepGate struct {
	mu      sync.Mutex
	wait    chan struct{} // nil: open
	entered chan struct{} // a step waited (once per close)
}

func newStepGate() *stepGate { return &stepGate{} }

// close closes the gate and returns what opens it.
func (g *stepGate) close() (open func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := make(chan struct{})
	g.wait, g.entered = w, make(chan struct{})
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			g.wait = nil
			g.mu.Unlock()
			close(w)
		})
	}
}

func (g *stepGate) pass(ctx context.Context) {
	g.mu.Lock()
	w, entered := g.wait, g.entered
	if w != nil {
		select {
		case <-entered:
		default:
			close(entered)
		}
	}
	g.mu.Unlock()
	if w == nil {
		return
	}
	select {
	case <-w:
	case <-ctx.Done():
	}
}

// gatedBackend waits at the gate before each forward pass.
type gatedBackend struct {
	backend.Backend
	g *stepGate
}

func (b gatedBackend) NewStep(ctx context.Context) backend.Step {
	b.g.pass(ctx)
	return b.Backend.NewStep(ctx)
}

// TestCloudUpstreams: backend_override "cloud" and cloud_fallback against
// real upstreams that are not fusion's own code paths for the model: an
// OpenAI-compatible one, mlx-lm's server (mlx_lm server 0.32.2 on MLX's
// CPU device, over the same demo model), and an Anthropic-compatible one,
// another fusion node's Messages API (its key read from a file). The
// cluster is two nodes: a has the model, b has none, so b's requests for
// it are forwarded to a, and the cloud call is made by b. It covers both
// dialects in against both kinds of upstream, streamed and not; a 429
// from the cluster that falls back to the cloud (and stays a 429 when the
// upstream is down); an upstream down (502) or refusing (its 401); the
// configuration replicated from a to b; and keys absent from every log
// line and admin answer.
func TestCloudUpstreams(t *testing.T) {
	models := nodetest.Models(t)
	waitMLXLM := startMLXLMServer(t, filepath.Join(models, nodetest.Model))
	up := nodetest.Start(t, nodetest.Options{APIKey: upstreamKey, ModelsDir: models})
	keyFile := filepath.Join(t.TempDir(), "anthropic.key")
	if err := os.WriteFile(keyFile, []byte(upstreamKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FUSION_TEST_CLOUD_KEY", cloudEnvKey)
	t.Setenv("FUSION_TEST_CLOUD_WRONG", wrongCloudKey)

	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	gate := newStepGate()
	a := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, MaxQueued: 1, Logger: logger, Cluster: nodetest.Member("a", 1, nil),
		WrapBackend: func(_ string, be backend.Backend) backend.Backend { return gatedBackend{Backend: be, g: gate} }})
	b := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: t.TempDir(), Logger: logger, Cluster: nodetest.Member("b", 0, []string{a.Cluster().GossipAddr()})})

	oaRoot := waitMLXLM() // started first: it takes the longest to come up
	upstreams := func(fallbackTo string) string {
		return `{"upstreams":[
			{"name":"mlx","kind":"openai","base_url":"` + oaRoot + `","api_key_env":"FUSION_TEST_CLOUD_KEY","timeout_seconds":120,
			 "models":{"gpt-demo":"default_model"` + map[bool]string{true: `,"demo":"default_model"`}[fallbackTo == "mlx"] + `}},
			{"name":"claude","kind":"anthropic","base_url":"` + up.URL() + `/v1","api_key_file":"` + keyFile + `","models":{"claude-demo":"demo"}},
			{"name":"down","kind":"openai","base_url":"http://127.0.0.1:1/v1","timeout_seconds":5,
			 "models":{"down-demo":"x"` + map[bool]string{true: `,"demo":"x"`}[fallbackTo == "down"] + `}},
			{"name":"badkey","kind":"anthropic","base_url":"` + up.URL() + `/v1","api_key_env":"FUSION_TEST_CLOUD_WRONG","models":{"badkey-demo":"demo"}}]}`
	}
	t.Run("config", func(t *testing.T) {
		code, _, raw := cloudCall(t, http.MethodPut, a.URL()+"/admin/api/cloud", "k",
			`{"upstreams":[{"name":"x","kind":"openai","base_url":"http://127.0.0.1:1/v1","api_key":"`+cloudEnvKey+`","default":true}]}`)
		if code != 400 || !strings.Contains(string(raw), `"param":"upstreams[0].api_key"`) || strings.Contains(string(raw), cloudEnvKey) {
			t.Errorf("a key in the document: %d %s", code, raw)
		}
		code, _, raw = cloudCall(t, http.MethodPut, a.URL()+"/admin/api/cloud", "k", upstreams("mlx"))
		if code != 200 {
			t.Fatalf("PUT: %d %s", code, raw)
		}
		// Replicated: b serves it, and reads the keys itself.
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, _, raw = cloudCall(t, http.MethodGet, b.URL()+"/admin/api/cloud", "k", "")
			var doc struct {
				Source    string
				Upstreams []struct {
					Name        string
					KeySource   string `json:"key_source"`
					KeyReadable bool   `json:"key_readable"`
				}
			}
			_ = json.Unmarshal(raw, &doc)
			if code == 200 && doc.Source == "cluster" && len(doc.Upstreams) == 4 {
				if doc.Upstreams[0].KeySource != "env:FUSION_TEST_CLOUD_KEY" || !doc.Upstreams[0].KeyReadable || !doc.Upstreams[1].KeyReadable {
					t.Errorf("GET on b: %s", raw)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("b never had the configuration: %d %s", code, raw)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	const (
		oaPath  = "/v1/chat/completions"
		antPath = "/v1/messages"
	)
	chat := func(model string, stream bool) string {
		return fmt.Sprintf(`{"model":%q,"max_tokens":6,"temperature":0,"stream":%v,"stream_options":null,"backend_override":"cloud","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Say hello"}]}`, model, stream)
	}
	oaStream := func(model string) string {
		return fmt.Sprintf(`{"model":%q,"max_tokens":6,"temperature":0,"stream":true,"stream_options":{"include_usage":true},"backend_override":"cloud","messages":[{"role":"user","content":"Say hello"}]}`, model)
	}
	msg := func(model string, stream bool) string {
		return fmt.Sprintf(`{"model":%q,"max_tokens":6,"temperature":0,"stream":%v,"backend_override":"cloud","system":"Be brief.","messages":[{"role":"user","content":"Say hello"}]}`, model, stream)
	}
	cases := []struct {
		name, path, body, served string
		stream                   bool
	}{
		{"openai in, openai upstream", oaPath, chat("gpt-demo", false), "cloud:mlx", false},
		{"openai in, openai upstream, streamed", oaPath, oaStream("gpt-demo"), "cloud:mlx", true},
		{"anthropic in, openai upstream", antPath, msg("gpt-demo", false), "cloud:mlx", false},
		{"anthropic in, openai upstream, streamed", antPath, msg("gpt-demo", true), "cloud:mlx", true},
		{"openai in, anthropic upstream", oaPath, chat("claude-demo", false), "cloud:claude", false},
		{"openai in, anthropic upstream, streamed", oaPath, oaStream("claude-demo"), "cloud:claude", true},
		{"anthropic in, anthropic upstream", antPath, msg("claude-demo", false), "cloud:claude", false},
		{"anthropic in, anthropic upstream, streamed", antPath, msg("claude-demo", true), "cloud:claude", true},
	}
	for _, from := range []*node.Node{a, b} {
		for _, tc := range cases {
			t.Run(tc.name+" via "+from.Cluster().ID(), func(t *testing.T) {
				code, served, raw := cloudCall(t, http.MethodPost, from.URL()+tc.path, "k", tc.body)
				if code != 200 || served != tc.served {
					t.Fatalf("%d served by %q: %s", code, served, raw)
				}
				var (
					text  string
					usage map[string]any
				)
				if tc.stream {
					var ended bool
					text, ended, usage = sseText(raw)
					if !ended {
						t.Errorf("stream not ended: %s", raw)
					}
				} else {
					var doc struct {
						Choices []struct{ Message struct{ Content string } }
						Content []struct{ Text string }
						Usage   map[string]any
					}
					if err := json.Unmarshal(raw, &doc); err != nil {
						t.Fatal(err)
					}
					for _, c := range doc.Choices {
						text += c.Message.Content
					}
					for _, c := range doc.Content {
						text += c.Text
					}
					usage = doc.Usage
				}
				in, out := usage["prompt_tokens"], usage["completion_tokens"]
				if tc.path == antPath {
					// Anthropic counts cached prompt tokens apart (mlx-lm's
					// server has a prompt cache of its own).
					n, _ := usage["input_tokens"].(float64)
					read, _ := usage["cache_read_input_tokens"].(float64)
					written, _ := usage["cache_creation_input_tokens"].(float64)
					in, out = n+read+written, usage["output_tokens"]
				}
				if n, _ := in.(float64); n < 5 {
					t.Errorf("prompt tokens %v (usage %v): %s", in, usage, raw)
				}
				if n, _ := out.(float64); n < 1 || n > 6 {
					t.Errorf("completion tokens %v (usage %v): %s", out, usage, raw)
				}
				t.Logf("%q", text)
			})
		}
	}

	t.Run("metrics", func(t *testing.T) {
		// The upstreams' usage counts as a local answer's, on the node
		// that made the call.
		_, _, raw := cloudCall(t, http.MethodGet, b.URL()+"/metrics?format=prometheus", "k", "")
		for _, series := range []string{
			`fusion_generation_requests_total{model="gpt-demo",outcome="ok"} 4`,
			`fusion_generation_requests_total{model="claude-demo",outcome="ok"} 4`,
			`fusion_prompt_tokens_total{model="gpt-demo"}`, `fusion_generated_tokens_total{model="claude-demo"}`,
		} {
			line := ""
			for _, l := range strings.Split(string(raw), "\n") {
				if strings.HasPrefix(l, series) {
					line = l
				}
			}
			if line == "" || strings.HasSuffix(line, " 0") {
				t.Errorf("%s: %q", series, line)
			}
		}
	})

	t.Run("official SDKs", func(t *testing.T) {
		oc := oa.NewClient(oaopt.WithBaseURL(b.URL()+"/v1"), oaopt.WithAPIKey("k"), oaopt.WithMaxRetries(0))
		s := oc.Chat.Completions.NewStreaming(context.Background(), oa.ChatCompletionNewParams{Model: "claude-demo", MaxTokens: oa.Int(5),
			Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage("Say hello")}}, oaopt.WithJSONSet("backend_override", "cloud"))
		var acc oa.ChatCompletionAccumulator
		for s.Next() {
			acc.AddChunk(s.Current())
		}
		if err := s.Err(); err != nil || len(acc.Choices) != 1 || acc.Choices[0].FinishReason == "" {
			t.Errorf("openai-go: %v %+v", err, acc.Choices)
		}
		ac := ant.NewClient(antopt.WithBaseURL(b.URL()), antopt.WithAPIKey("k"), antopt.WithMaxRetries(0))
		m, err := ac.Messages.New(context.Background(), ant.MessageNewParams{Model: "gpt-demo", MaxTokens: 5,
			Messages: []ant.MessageParam{ant.NewUserMessage(ant.NewTextBlock("Say hello"))}}, antopt.WithJSONSet("backend_override", "cloud"))
		if err != nil || m.Usage.InputTokens == 0 || m.Usage.OutputTokens == 0 || m.StopReason == "" {
			t.Errorf("anthropic-sdk-go: %v %+v", err, m)
		}
	})

	t.Run("errors", func(t *testing.T) {
		tests := []struct {
			name, path, body string
			code             int
			want             string // in the body
		}{
			{"down, openai", oaPath, chat("down-demo", false), 502, `"type":"server_error"`},
			{"down, openai, streamed", oaPath, chat("down-demo", true), 502, `unreachable`},
			{"down, anthropic", antPath, msg("down-demo", false), 502, `"type":"api_error"`},
			{"refused, openai", oaPath, chat("badkey-demo", false), 401, `upstream \"badkey\" refused the request (401)`},
			{"refused, anthropic", antPath, msg("badkey-demo", false), 401, `"type":"authentication_error"`},
			{"no upstream", oaPath, chat("nothing", false), 400, `no cloud upstream is configured`},
			{"bad value", oaPath, strings.Replace(chat("demo", false), `"cloud"`, `"moon"`, 1), 400, `not one of mlx, cpu, rapid, cloud`},
			{"bad value, anthropic", antPath, strings.Replace(msg("demo", false), `"cloud"`, `"moon"`, 1), 400, `not one of mlx, cpu, rapid, cloud`},
		}
		for _, tc := range tests {
			code, _, raw := cloudCall(t, http.MethodPost, b.URL()+tc.path, "k", tc.body)
			if code != tc.code || !strings.Contains(string(raw), tc.want) {
				t.Errorf("%s: %d %s, want %d with %s", tc.name, code, raw, tc.code, tc.want)
			}
			if tc.code == 502 && !strings.Contains(string(raw), "127.0.0.1:1") {
				t.Errorf("%s: the reason does not name the upstream: %s", tc.name, raw)
			}
		}
	})

	t.Run("fallback", func(t *testing.T) {
		// a admits one generation: hold one in its first step.
		release := gate.close()
		held := make(chan int, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodPost, a.URL()+oaPath, strings.NewReader(`{"model":"demo","max_tokens":2,"messages":[{"role":"user","content":"go on"}]}`))
			req.Header.Set("Authorization", "Bearer k")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				held <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			held <- resp.StatusCode
		}()
		select {
		case <-gate.entered:
		case <-time.After(time.Minute):
			t.Fatal("the held generation never reached a step")
		}
		released := false
		defer func() {
			if !released {
				release()
			}
		}()
		local := `{"model":"demo","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`
		localMsg := `{"model":"demo","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`
		if code, _, raw := cloudCall(t, http.MethodPost, b.URL()+oaPath, "k", local); code != 429 {
			t.Fatalf("without cloud_fallback: %d %s", code, raw)
		}
		if code, _, raw := cloudCall(t, http.MethodPut, a.URL()+"/admin/api/models/demo/settings", "k", `{"cloud_fallback":true}`); code != 200 {
			t.Fatalf("settings: %d %s", code, raw)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, served, raw := cloudCall(t, http.MethodPost, b.URL()+oaPath, "k", local)
			if code == 200 && served == "cloud:mlx" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("with cloud_fallback: %d %q %s", code, served, raw)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if code, served, raw := cloudCall(t, http.MethodPost, a.URL()+antPath, "k", localMsg); code != 200 || served != "cloud:mlx" {
			t.Errorf("anthropic with cloud_fallback: %d %q %s", code, served, raw)
		}
		// The fallback upstream down: the cluster's own answer stays.
		if code, _, raw := cloudCall(t, http.MethodPut, a.URL()+"/admin/api/cloud", "k", upstreams("down")); code != 200 {
			t.Fatalf("PUT: %d %s", code, raw)
		}
		deadline = time.Now().Add(30 * time.Second)
		for {
			code, _, raw := cloudCall(t, http.MethodPost, b.URL()+oaPath, "k", local)
			if code == 429 && strings.Contains(string(raw), "overloaded") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("fallback upstream down: %d %s", code, raw)
			}
			time.Sleep(50 * time.Millisecond)
		}
		release()
		released = true
		if code := <-held; code != 200 {
			t.Errorf("the held generation: %d", code)
		}
		// Local requests are served locally, whatever the cloud's state.
		deadline = time.Now().Add(30 * time.Second)
		for {
			code, served, raw := cloudCall(t, http.MethodPost, b.URL()+oaPath, "k", local)
			if code == 200 && served == "a" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("local after the hold: %d %q %s", code, served, raw)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("keys hidden", func(t *testing.T) {
		for _, n := range []*node.Node{a, b} {
			_, _, raw := cloudCall(t, http.MethodGet, n.URL()+"/admin/api/cloud", "k", "")
			_, _, settings := cloudCall(t, http.MethodGet, n.URL()+"/admin/api/global-settings", "k", "")
			for _, k := range []string{cloudEnvKey, upstreamKey, wrongCloudKey} {
				if bytes.Contains(raw, []byte(k)) || bytes.Contains(settings, []byte(k)) {
					t.Errorf("a key in an admin answer of %s: %s", n.Cluster().ID(), raw)
				}
			}
		}
		l := logs.String()
		if !strings.Contains(l, "cloud upstream") {
			t.Errorf("no cloud log line at all (the check below would be empty)")
		}
		for _, k := range []string{cloudEnvKey, upstreamKey, wrongCloudKey} {
			if strings.Contains(l, k) {
				t.Errorf("key %s… in the logs", k[:6])
			}
		}
	})
}
