//go:build cgo

package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fusion/engine/backend"
	"fusion/engine/backend/mlx"
	"fusion/engine/backend/mlx/mlxtest"
	"fusion/engine/runner"
	"fusion/internal/testenv"
	"fusion/node"
	"fusion/node/nodetest"
	"fusion/router"
	"fusion/router/admin"
)

func getJSON(t *testing.T, url, key string, out any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("GET %s: %s: %v", url, raw, err)
	}
}

func health(t *testing.T, url string) router.Health {
	t.Helper()
	var h router.Health
	getJSON(t, url+"/health", "", &h)
	if h.Backend == nil {
		t.Fatal("/health has no backend")
	}
	return h
}

func modelBackend(t *testing.T, url, key, model string) string {
	t.Helper()
	var list admin.ModelList
	getJSON(t, url+"/admin/api/models", key, &list)
	for _, m := range list.Data {
		if m.ID == model {
			return m.Backend
		}
	}
	t.Fatalf("%s not in /admin/api/models: %+v", model, list)
	return ""
}

// TestBackendInHealthAndModels: a node asked for MLX serves on it, says
// so in /health and /admin/api/models, and its mx_memory is MLX's
// counters (they grow when the model loads and match MLX's own figure);
// a node left on auto, on a machine whose MLX has only its CPU device,
// serves on the CPU backend and says why.
func TestBackendInHealthAndModels(t *testing.T) {
	testenv.NeedMLX(t, mlx.Available())
	models := nodetest.Models(t)
	n := nodetest.Start(t, nodetest.Options{ModelsDir: models, Backend: runner.BackendMLX, MLXMemoryLimit: 6 << 30})
	h := health(t, n.URL())
	if b := h.Backend; b.Name != "mlx" || b.Requested != "mlx" || !b.MLX.Available || b.MLX.Version == "" || b.MLX.MemoryLimit != 6<<30 {
		t.Errorf("/health backend %+v", b)
	}
	if got := modelBackend(t, n.URL(), "", nodetest.Model); got != "mlx" {
		t.Errorf("/admin/api/models: demo on %q before loading, want mlx", got)
	}
	before := h.MXMemory.ActiveBytes
	chatGreedy(t, n.URL(), "hello")
	after := health(t, n.URL())
	m, err := n.Runner().MLXMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if after.MXMemory.ActiveBytes <= before || after.MXMemory.ActiveBytes != m.Active || after.MXMemory.PeakBytes < m.Active {
		t.Errorf("mx_memory %+v (before the load: %d active), MLX counters %+v", after.MXMemory, before, m)
	}
	if w := n.Runner().Stats().WeightBytes; after.MXMemory.ActiveBytes < w {
		t.Errorf("MLX active %d bytes < the model's weights %d", after.MXMemory.ActiveBytes, w)
	}
	if got := modelBackend(t, n.URL(), "", nodetest.Model); got != "mlx" {
		t.Errorf("/admin/api/models: loaded demo on %q, want mlx", got)
	}
	var stats admin.StatsAnswer
	getJSON(t, n.URL()+"/admin/api/stats", "", &stats)
	if mm := stats.Total.Memory.MLX; mm == nil || mm.Active < n.Runner().Stats().WeightBytes || mm.Peak < mm.Active {
		t.Errorf("/admin/api/stats: MLX memory %+v (weights %d)", mm, n.Runner().Stats().WeightBytes)
	}

	auto := nodetest.Start(t, nodetest.Options{ModelsDir: models, Backend: runner.BackendAuto})
	b := health(t, auto.URL()).Backend
	want := "cpu"
	if b.MLX.Device == "gpu" {
		want = "mlx"
	}
	if b.Name != want || b.Requested != "auto" || !b.MLX.Available || !strings.HasPrefix(b.Reason, "auto: ") {
		t.Errorf("auto: /health backend %+v, want %s", b, want)
	}
	if b.MLX.Device == "cpu" && !strings.Contains(b.Reason, "only its CPU device") {
		t.Errorf("auto on MLX's CPU device: reason %q", b.Reason)
	}
	if _, err := auto.Runner().MLXMemory(context.Background()); want == "cpu" && err == nil {
		t.Error("a node whose models run on the CPU backend reads MLX's counters")
	}
	var autoStats admin.StatsAnswer
	getJSON(t, auto.URL()+"/admin/api/stats", "", &autoStats)
	if mm := autoStats.Total.Memory.MLX; want == "cpu" && mm != nil {
		t.Errorf("/admin/api/stats of a node on the CPU backend shows MLX memory %+v", mm)
	}
	if got := modelBackend(t, auto.URL(), "", nodetest.Model); got != want {
		t.Errorf("auto: /admin/api/models: demo on %q, want %s", got, want)
	}
}

// TestBackendInNodeCatalog: the backend a node serves on is gossiped: a
// second node of the cluster sees it in /admin/api/cluster.
func TestBackendInNodeCatalog(t *testing.T) {
	testenv.NeedMLX(t, mlx.Available())
	models := nodetest.Models(t)
	a := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Backend: runner.BackendMLX, Cluster: nodetest.Member("a", 1, nil)})
	b := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Backend: runner.BackendCPU, Cluster: nodetest.Member("b", 0, []string{a.Cluster().GossipAddr()})})
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, doc := clusterDoc(t, b.URL(), "k")
		got := map[string]string{}
		for _, m := range doc.Members {
			got[m.ID] = m.Backend
		}
		if got["a"] == "mlx" && got["b"] == "cpu" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("members seen from b: %+v", doc.Members)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// errorBody is an error answer in either dialect's shape.
type errorBody struct {
	Type  string `json:"type"` // Anthropic: "error"
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

func post(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// TestMLXErrorMidStep: an MLX error in the middle of a generation (a real
// one, raised by MLX through the binding's error handler) fails that
// request with a 500 in the dialect's error shape, OpenAI's and
// Anthropic's, streamed or not, and the node serves the next request as
// before, with the same answer.
func TestMLXErrorMidStep(t *testing.T) {
	testenv.NeedMLX(t, mlx.Available())
	var faulty *mlxtest.Faulty
	n := nodetest.Start(t, nodetest.Options{Backend: runner.BackendMLX, WrapBackend: func(_ string, be backend.Backend) backend.Backend {
		faulty = mlxtest.Wrap(be)
		return faulty
	}})
	want := chatGreedy(t, n.URL(), "tell me")
	chat := `{"model":"demo","max_tokens":8,"temperature":0,"messages":[{"role":"user","content":"tell me"}]}`
	cases := []struct {
		name, path, body string
		anthropic        bool
	}{
		{"openai", "/v1/chat/completions", chat, false},
		{"anthropic", "/v1/messages", chat, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			faulty.FailSteps(0, 1)
			failed := faulty.Failed.Load()
			code, raw := post(t, n.URL()+c.path, c.body)
			var e errorBody
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatalf("%d %s: %v", code, raw, err)
			}
			if code != http.StatusInternalServerError || !strings.Contains(e.Error.Message, "mlx: ") || !strings.Contains(e.Error.Message, "reshape") ||
				(c.anthropic && (e.Type != "error" || e.Error.Type != "api_error")) || (!c.anthropic && e.Error.Type == "") {
				t.Errorf("answer %d %s", code, raw)
			}
			if faulty.Failed.Load() != failed+1 {
				t.Errorf("%d steps failed, want 1", faulty.Failed.Load()-failed)
			}
			if got := chatGreedy(t, n.URL(), "tell me"); got.Content != want.Content {
				t.Errorf("after the failure: %q, want %q", got.Content, want.Content)
			}
		})
	}
}

// TestMLXCancelFreesArrays: a client that goes away in the middle of a
// stream stops its generation, and MLX's active memory comes back to
// where it was before the request (the step's arrays and the sequence's
// KV cache are freed).
func TestMLXCancelFreesArrays(t *testing.T) {
	testenv.NeedMLX(t, mlx.Available())
	n := nodetest.Start(t, nodetest.Options{Backend: runner.BackendMLX, CacheHotBytes: -1, CacheSSDBytes: -1})
	chatGreedy(t, n.URL(), "warm up") // loads the model
	ctx := context.Background()
	waitIdle := func() {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for n.Runner().Stats().InFlight != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("generation still in flight: %+v", n.Runner().Stats())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitIdle()
	before, err := n.Runner().MLXMemory(ctx)
	if err != nil {
		t.Fatal(err)
	}

	rctx, cancel := context.WithCancel(ctx)
	body := `{"model":"demo","max_tokens":100000,"stream":true,"messages":[{"role":"user","content":"` + longPrompt() + `"}]}`
	req, _ := http.NewRequestWithContext(rctx, http.MethodPost, n.URL()+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	chunks := 0
	for chunks < 5 && sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: {") {
			chunks++
		}
	}
	during, err := n.Runner().MLXMemory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	if chunks < 5 {
		t.Fatalf("stream ended after %d chunks", chunks)
	}
	waitIdle()
	if n.Runner().Stats().Cancelled == 0 {
		t.Error("the generation was not counted as cancelled")
	}
	after, err := n.Runner().MLXMemory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("MLX active: %d before, %d streaming, %d after the cancel", before.Active, during.Active, after.Active)
	if during.Active <= before.Active {
		t.Errorf("MLX active memory did not grow while streaming (%d, before %d): the KV cache is not in MLX?", during.Active, before.Active)
	}
	if after.Active != before.Active {
		t.Errorf("MLX active memory %d after the cancel, %d before the request", after.Active, before.Active)
	}
}

// helperEnv runs TestMLXFallbackHelper as a child node.
const helperEnv = "FUSION_TEST_MLX_FALLBACK_HELPER"

// TestMLXFallbackHelper is the child process of TestMLXUnavailable: a node
// asked for MLX (with FUSION_MLXC set by the parent), which prints its
// /health and one answer's status as JSON on stdout.
func TestMLXFallbackHelper(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("child process of TestMLXUnavailable")
	}
	m, err := node.New(node.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), ModelsDir: nodetest.Models(t), Backend: runner.BackendMLX, Threads: 1, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	m.Start()
	defer m.Stop(context.Background())
	h := health(t, m.URL())
	code, _ := post(t, m.URL()+"/v1/chat/completions", `{"model":"demo","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`)
	out, _ := json.Marshal(map[string]any{"backend": h.Backend, "chat": code})
	fmt.Printf("\nRESULT %s\n", out)
}

// TestMLXUnavailable: when libmlxc is missing, is not a library, or is a
// library without mlx-c's functions, a node asked for MLX serves on the
// CPU backend and /health says why. Loading is once per process, so each
// case runs a child process with FUSION_MLXC pointing at the bad file.
func TestMLXUnavailable(t *testing.T) {
	dir := t.TempDir()
	notLib := filepath.Join(dir, "libmlxc.so")
	if err := os.WriteFile(notLib, []byte("not an ELF file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	otherLib := ""
	for _, p := range []string{"/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1", "/lib/aarch64-linux-gnu/libz.so.1", "/usr/lib/libz.1.dylib"} {
		if _, err := os.Stat(p); err == nil {
			otherLib = p
			break
		}
	}
	cases := []struct{ name, path, reason string }{
		{"missing", filepath.Join(dir, "nowhere", "libmlxc.so"), "not found"},
		{"not a library", notLib, "dlopen"},
		{"another library", otherLib, "not an mlx-c library"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.path == "" {
				t.Skip("no libz found to stand for a library that is not mlx-c")
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestMLXFallbackHelper$", "-test.count=1")
			cmd.Env = append(os.Environ(), helperEnv+"=1", mlx.EnvLibrary+"="+c.path, "FUSION_REQUIRE_MLX=0")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			_, js, ok := strings.Cut(string(out), "\nRESULT ")
			if !ok {
				t.Fatalf("child printed no result:\n%s", out)
			}
			js, _, _ = strings.Cut(js, "\n")
			var res struct {
				Backend runner.BackendStatus
				Chat    int
			}
			if err := json.Unmarshal([]byte(js), &res); err != nil {
				t.Fatal(err)
			}
			b := res.Backend
			if b.Name != "cpu" || b.Requested != "mlx" || b.MLX.Available || !b.MLX.Probed ||
				!strings.Contains(b.Reason, "MLX is unavailable") || !strings.Contains(b.Reason, c.reason) || !strings.Contains(b.MLX.Error, c.path) {
				t.Errorf("backend %+v", b)
			}
			if res.Chat != http.StatusOK {
				t.Errorf("chat on the fallback: %d", res.Chat)
			}
		})
	}
}
