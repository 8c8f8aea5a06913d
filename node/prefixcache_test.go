package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"fusion/engine/demo"
	"fusion/engine/demo/demotest"
	"fusion/engine/runner"
	"fusion/node"
	"fusion/node/nodetest"
)

// longPrompt is a user message of a few hundred tokens for the demo
// tokenizer: several 64-token blocks and a partial one.
func longPrompt() string {
	words := []string{"alpha", "kernel", "tensor", "cache", "block", "prefix", "node", "river", "stone", "light"}
	var b strings.Builder
	for i := range 150 {
		fmt.Fprintf(&b, "%s%d ", words[(i*7)%len(words)], i%13)
	}
	return b.String()
}

// reusable is how many tokens of a prompt of n tokens a request restores
// when every block is cached: the whole blocks, less the last token when
// they are the whole prompt.
func reusable(n int) int {
	if n%64 == 0 {
		return n - 1
	}
	return n / 64 * 64
}

// chatResult is what the cache tests compare between runs.
type chatResult struct {
	Content  string
	Logprobs []float64
	Prompt   int
	Cached   int
}

func chatGreedy(t *testing.T, url, content string) chatResult {
	t.Helper()
	return chatWith(t, url, "", map[string]any{
		"model": nodetest.Model, "messages": []map[string]string{{"role": "user", "content": content}},
		"max_tokens": 24, "temperature": 0, "logprobs": true,
	})
}

// chatWith posts an OpenAI chat request (with logprobs) with the API key
// key ("" for none) and returns its answer.
func chatWith(t *testing.T, url, key string, request map[string]any) chatResult {
	t.Helper()
	return chatRetrying(t, url, key, request, 0)
}

// chatRetrying is chatWith trying again, up to retries times, while the
// answer is a 503 (a model not ready yet: nothing ran).
func chatRetrying(t *testing.T, url, key string, request map[string]any, retries int) chatResult {
	t.Helper()
	body, _ := json.Marshal(request)
	var raw []byte
	for try := 0; ; try++ {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if resp.StatusCode != http.StatusServiceUnavailable || try >= retries {
			t.Fatalf("chat: %d %s", resp.StatusCode, raw)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var out struct {
		Choices []struct {
			Message  struct{ Content string }
			Logprobs struct {
				Content []struct{ Logprob float64 }
			}
		}
		Usage struct {
			PromptTokens        int `json:"prompt_tokens"`
			CompletionTokens    int `json:"completion_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		}
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Choices) != 1 {
		t.Fatalf("chat answer %s: %v", raw, err)
	}
	r := chatResult{Content: out.Choices[0].Message.Content, Prompt: out.Usage.PromptTokens, Cached: out.Usage.PromptTokensDetails.CachedTokens}
	for _, lp := range out.Choices[0].Logprobs.Content {
		r.Logprobs = append(r.Logprobs, lp.Logprob)
	}
	if len(r.Logprobs) != out.Usage.CompletionTokens || len(r.Logprobs) == 0 {
		t.Fatalf("%d logprobs for %d tokens", len(r.Logprobs), out.Usage.CompletionTokens)
	}
	return r
}

// sameOutput checks two greedy answers are the same text with the very
// same log-probabilities (the KV restored is bit-identical).
func sameOutput(t *testing.T, what string, got, want chatResult) {
	t.Helper()
	if got.Content != want.Content || !reflect.DeepEqual(got.Logprobs, want.Logprobs) {
		t.Errorf("%s: answer %q %v, want %q %v", what, got.Content, got.Logprobs, want.Content, want.Logprobs)
	}
}

func stop(t *testing.T, n *node.Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

func postJSON(t *testing.T, url, body string, out any) int {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s: %s: %v", url, raw, err)
		}
	}
	return resp.StatusCode
}

type probeAnswer struct {
	ModelID       string `json:"model_id"`
	ModelLoaded   bool   `json:"model_loaded"`
	TotalTokens   int    `json:"total_tokens"`
	BlockSize     int    `json:"block_size"`
	TotalBlocks   int    `json:"total_blocks"`
	BlocksSSDHot  int    `json:"blocks_ssd_hot"`
	BlocksSSDDisk int    `json:"blocks_ssd_disk"`
	BlocksCold    int    `json:"blocks_cold"`
	SSDHitTokens  int    `json:"ssd_hit_tokens"`
	ColdTokens    int    `json:"cold_tokens"`
}

func probe(t *testing.T, url, content string) probeAnswer {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model_id": nodetest.Model, "messages": []map[string]string{{"role": "user", "content": content}}})
	var p probeAnswer
	if code := postJSON(t, url+"/admin/api/cache/probe", string(body), &p); code != http.StatusOK {
		t.Fatalf("probe: %d", code)
	}
	if p.ModelID != nodetest.Model || p.BlockSize != 64 || p.TotalBlocks != (p.TotalTokens+63)/64 ||
		p.BlocksSSDHot+p.BlocksSSDDisk+p.BlocksCold != p.TotalBlocks || p.SSDHitTokens+p.ColdTokens != p.TotalTokens ||
		p.SSDHitTokens != 64*(p.BlocksSSDHot+p.BlocksSSDDisk) {
		t.Errorf("inconsistent probe %+v", p)
	}
	return p
}

// TestPrefixCacheColdHotRestart: on each backend, the same greedy request
// gives the same answer, to the bit of its log-probabilities, with no
// cache, with the cache cold, hot in RAM (the KV blocks exported from the
// backend to host bytes), and restored from the SSD after the node
// restarts on the same data directory (imported back); the restored runs
// report the reused tokens, and the probe sees the blocks where they are.
// A node on the other backend does not take the blocks (the backend is
// part of the model's cache key).
func TestPrefixCacheColdHotRestart(t *testing.T) {
	models := nodetest.Models(t)
	content := longPrompt()
	for _, backend := range []string{runner.BackendCPU, runner.BackendMLX} {
		t.Run(backend, func(t *testing.T) {
			prefixColdHotRestart(t, backend, models, content)
		})
	}
}

func prefixColdHotRestart(t *testing.T, backend, models, content string) {
	off := nodetest.Start(t, nodetest.Options{Backend: backend, ModelsDir: models, CacheHotBytes: -1, CacheSSDBytes: -1})
	base := chatGreedy(t, off.URL(), content)
	if base.Prompt < 4*64 || base.Cached != 0 {
		t.Fatalf("no-cache run: %d prompt tokens, %d cached", base.Prompt, base.Cached)
	}
	stop(t, off)
	wantCached := reusable(base.Prompt)

	data := t.TempDir()
	a := nodetest.Start(t, nodetest.Options{Backend: backend, ModelsDir: models, DataDir: data})
	if p := probe(t, a.URL(), content); p.ModelLoaded || p.BlocksCold != p.TotalBlocks || p.TotalTokens != base.Prompt {
		t.Errorf("probe before any request: %+v", p)
	}
	cold := chatGreedy(t, a.URL(), content)
	sameOutput(t, "cold", cold, base)
	if cold.Cached != 0 {
		t.Errorf("cold run: %d cached tokens", cold.Cached)
	}
	p := probe(t, a.URL(), content)
	if !p.ModelLoaded || p.BlocksSSDHot != base.Prompt/64 || p.BlocksSSDDisk != 0 {
		t.Errorf("probe after the cold run: %+v", p)
	}
	hot := chatGreedy(t, a.URL(), content)
	sameOutput(t, "hot", hot, base)
	if hot.Cached != wantCached {
		t.Errorf("hot run: %d cached tokens, want %d", hot.Cached, wantCached)
	}
	if s := a.Runner().CacheStats(); s.HotHits != int64(base.Prompt/64) {
		t.Errorf("hot run: stats %+v", s)
	}
	stop(t, a)
	files, _ := filepath.Glob(filepath.Join(data, "cache", "*", "*.kvb"))
	if len(files) < base.Prompt/64 {
		t.Fatalf("%d block files under %s/cache after stop, want at least %d", len(files), data, base.Prompt/64)
	}

	b := nodetest.Start(t, nodetest.Options{Backend: backend, ModelsDir: models, DataDir: data})
	p = probe(t, b.URL(), content)
	if p.ModelLoaded || p.BlocksSSDHot != 0 || p.BlocksSSDDisk != base.Prompt/64 {
		t.Errorf("probe after the restart: %+v", p)
	}
	ssd := chatGreedy(t, b.URL(), content)
	sameOutput(t, "restored from the SSD", ssd, base)
	if ssd.Cached != wantCached {
		t.Errorf("SSD run: %d cached tokens, want %d", ssd.Cached, wantCached)
	}
	if s := b.Runner().CacheStats(); s.DiskHits != int64(base.Prompt/64) || s.Corrupt != 0 {
		t.Errorf("SSD run: stats %+v", s)
	}
	if p := probe(t, b.URL(), content); p.BlocksSSDHot != base.Prompt/64 {
		t.Errorf("blocks read from the SSD were not promoted: %+v", p)
	}

	// Anthropic reports the reuse too, and its three input counts add up.
	body, _ := json.Marshal(map[string]any{"model": nodetest.Model, "max_tokens": 4,
		"messages": []map[string]string{{"role": "user", "content": content}}})
	var msg struct {
		Usage struct {
			InputTokens              int `json:"input_tokens"`
			CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
			CacheReadInputTokens     int `json:"cache_read_input_tokens"`
		}
	}
	if code := postJSON(t, b.URL()+"/v1/messages", string(body), &msg); code != http.StatusOK {
		t.Fatalf("messages: %d", code)
	}
	if msg.Usage.CacheReadInputTokens != wantCached || msg.Usage.InputTokens+msg.Usage.CacheReadInputTokens+msg.Usage.CacheCreationInputTokens != base.Prompt {
		t.Errorf("anthropic usage %+v, want %d read of %d", msg.Usage, wantCached, base.Prompt)
	}

	other := runner.BackendMLX
	if backend == runner.BackendMLX {
		other = runner.BackendCPU
	}
	stop(t, b)
	c := nodetest.Start(t, nodetest.Options{Backend: other, ModelsDir: models, DataDir: data})
	if p := probe(t, c.URL(), content); p.BlocksSSDDisk != 0 || p.BlocksSSDHot != 0 {
		t.Errorf("a node on %s finds the blocks of %s: %+v", other, backend, p)
	}
}

// TestPrefixCacheCorruptBlocks: block files with flipped bytes and cut
// short are found (at start or on read), removed, counted and recomputed:
// the answer stays the same, and the recomputed blocks are written again.
func TestPrefixCacheCorruptBlocks(t *testing.T) {
	models := nodetest.Models(t)
	content := longPrompt()
	data := t.TempDir()

	a := nodetest.Start(t, nodetest.Options{ModelsDir: models, DataDir: data})
	want := chatGreedy(t, a.URL(), content)
	blocks := want.Prompt / 64
	stop(t, a)

	files, _ := filepath.Glob(filepath.Join(data, "cache", "*", "*.kvb"))
	if len(files) != blocks {
		t.Fatalf("%d block files, want %d", len(files), blocks)
	}
	for i, f := range files {
		switch i {
		case 0: // flipped in the data: found on read
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for j := 200; j < len(raw); j += 4096 {
				raw[j] ^= 0xff
			}
			os.WriteFile(f, raw, 0o644)
		case 1: // cut short: found at start
			st, _ := os.Stat(f)
			os.Truncate(f, st.Size()/2)
		case 2: // header cut: found at start
			os.Truncate(f, 10)
		}
	}

	b := nodetest.Start(t, nodetest.Options{ModelsDir: models, DataDir: data})
	if s := b.Runner().CacheStats(); s.Corrupt != 2 || s.DiskBlocks != blocks-2 {
		t.Errorf("after the restart: stats %+v, want 2 corrupt, %d blocks", s, blocks-2)
	}
	got := chatGreedy(t, b.URL(), content)
	sameOutput(t, "with corrupt blocks", got, want)
	b.Runner().FlushCache()
	s := b.Runner().CacheStats()
	if s.Corrupt < 2 || s.DiskBlocks != blocks {
		t.Errorf("after the request: stats %+v, want the bad blocks counted and %d blocks on the SSD", s, blocks)
	}
	stop(t, b)

	// Every block file is good again: a third start finds no bad one, and
	// restores the whole prefix from the SSD.
	c := nodetest.Start(t, nodetest.Options{ModelsDir: models, DataDir: data})
	again := chatGreedy(t, c.URL(), content)
	sameOutput(t, "after the repair", again, want)
	if s := c.Runner().CacheStats(); s.Corrupt != 0 || again.Cached != reusable(want.Prompt) {
		t.Errorf("after the repair: stats %+v, %d cached", s, again.Cached)
	}
}

// TestCacheAdminRoutes: the clears empty their tier, the probe rejects
// bad bodies in the OpenAI error shape, and the routes need the API key.
func TestCacheAdminRoutes(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: "k"})
	content := longPrompt()
	auth := func(method, path, body string) (int, []byte) { return apiDo(t, n, method, path, body) }
	if code := postJSON(t, n.URL()+"/admin/api/hot-cache/clear", "", nil); code != http.StatusUnauthorized {
		t.Errorf("clear without the key: %d", code)
	}
	req, _ := json.Marshal(map[string]any{"model": nodetest.Model, "max_tokens": 2,
		"messages": []map[string]string{{"role": "user", "content": content}}})
	if code, raw := auth("POST", "/v1/chat/completions", string(req)); code != 200 {
		t.Fatalf("chat: %d %s", code, raw)
	}
	n.Runner().FlushCache()
	probeBody, _ := json.Marshal(map[string]any{"model_id": nodetest.Model, "messages": []map[string]string{{"role": "user", "content": content}}})
	var p probeAnswer
	probeNow := func() probeAnswer {
		code, raw := auth("POST", "/admin/api/cache/probe", string(probeBody))
		if code != 200 {
			t.Fatalf("probe: %d %s", code, raw)
		}
		var p probeAnswer
		json.Unmarshal(raw, &p)
		return p
	}
	if p = probeNow(); p.BlocksSSDHot == 0 {
		t.Fatalf("probe after a request: %+v", p)
	}
	hot := p.BlocksSSDHot
	var health struct {
		MXMemory struct {
			CachedBytes int64 `json:"cached_bytes"`
		} `json:"mx_memory"`
	}
	if code, raw := auth("GET", "/health", ""); code != 200 || json.Unmarshal(raw, &health) != nil || health.MXMemory.CachedBytes <= 0 {
		t.Errorf("/health after a request: %d %s, want the RAM tier's bytes as cached", code, raw)
	}
	var met struct {
		Engine struct {
			PrefixCache struct {
				HotBlocks int    `json:"hot_blocks"`
				Stored    int64  `json:"stored"`
				Dropped   *int64 `json:"write_dropped"`
				Corrupt   *int64 `json:"corrupt"`
			} `json:"prefix_cache"`
		}
	}
	if code, raw := auth("GET", "/metrics", ""); code != 200 || json.Unmarshal(raw, &met) != nil ||
		met.Engine.PrefixCache.HotBlocks != hot || met.Engine.PrefixCache.Stored != int64(hot) ||
		met.Engine.PrefixCache.Dropped == nil || met.Engine.PrefixCache.Corrupt == nil {
		t.Errorf("/metrics after a request: %d %s, want the prefix cache's figures", code, raw)
	}
	if code, raw := auth("GET", "/metrics?format=prometheus", ""); code != 200 || !strings.Contains(string(raw), "fusion_prefix_cache_write_dropped_total 0") {
		t.Errorf("prometheus metrics lack the prefix cache's drops: %d", code)
	}
	code, raw := auth("POST", "/admin/api/hot-cache/clear", "")
	if code != 200 || !strings.Contains(string(raw), fmt.Sprintf(`"cleared_blocks":%d`, hot)) {
		t.Errorf("hot clear: %d %s", code, raw)
	}
	if p = probeNow(); p.BlocksSSDHot != 0 || p.BlocksSSDDisk != hot {
		t.Errorf("after the hot clear: %+v", p)
	}
	if code, raw := auth("POST", "/admin/api/ssd-cache/clear", ""); code != 200 || !strings.Contains(string(raw), `"status":"ok"`) {
		t.Errorf("ssd clear: %d %s", code, raw)
	}
	if p = probeNow(); p.BlocksSSDHot != 0 || p.BlocksSSDDisk != 0 || p.BlocksCold != p.TotalBlocks {
		t.Errorf("after both clears: %+v", p)
	}

	bad := []struct {
		name, body string
		code       int
		param      string
	}{
		{"not JSON", `{`, 400, ""},
		{"no model", `{"messages":[{"role":"user","content":"hi"}]}`, 400, "model_id"},
		{"no messages", `{"model_id":"demo"}`, 400, "messages"},
		{"messages not a list", `{"model_id":"demo","messages":"hi"}`, 400, "messages"},
		{"empty messages", `{"model_id":"demo","messages":[]}`, 400, "messages"},
		{"unknown model", `{"model_id":"nope","messages":[{"role":"user","content":"hi"}]}`, 404, "model"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			code, raw := auth("POST", "/admin/api/cache/probe", tc.body)
			var e struct {
				Error struct {
					Message string
					Param   *string
				}
			}
			if code != tc.code || json.Unmarshal(raw, &e) != nil || e.Error.Message == "" {
				t.Fatalf("%d %s, want %d in the OpenAI error shape", code, raw, tc.code)
			}
			if tc.param != "" && (e.Error.Param == nil || *e.Error.Param != tc.param) {
				t.Errorf("param %v, want %q", e.Error.Param, tc.param)
			}
		})
	}
}

// TestPrefixCacheModelChanged: blocks stored for a model are not used for
// another model put in its place under the same name (the key carries the
// weight files' fingerprint): after the swap and a restart the request
// reuses nothing and answers as the new model does.
func TestPrefixCacheModelChanged(t *testing.T) {
	models := nodetest.Models(t)
	content := longPrompt()
	data := t.TempDir()
	a := nodetest.Start(t, nodetest.Options{ModelsDir: models, DataDir: data})
	chatGreedy(t, a.URL(), content)
	stop(t, a)

	dir := filepath.Join(models, nodetest.Model)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	opts := demo.DefaultOptions()
	opts.Seed = 99
	if _, err := demo.Create(dir, opts); err != nil {
		t.Fatal(err)
	}
	off := nodetest.Start(t, nodetest.Options{ModelsDir: models, CacheHotBytes: -1, CacheSSDBytes: -1})
	want := chatGreedy(t, off.URL(), content)
	stop(t, off)

	b := nodetest.Start(t, nodetest.Options{ModelsDir: models, DataDir: data})
	if p := probe(t, b.URL(), content); p.BlocksSSDDisk != 0 {
		t.Errorf("probe of the new model: %+v", p)
	}
	got := chatGreedy(t, b.URL(), content)
	sameOutput(t, "the new model", got, want)
	if got.Cached != 0 {
		t.Errorf("the new model reused %d tokens of the old one", got.Cached)
	}
}

// TestPrefixCacheRecurrent: a node serving a qwen3_5_moe demo (Gated
// DeltaNet layers: a recurrent state per sequence) restores the cached
// blocks with their state snapshots on the second request and answers it
// as the first to the bit of the log-probabilities (the runner's
// TestRecurrentPrefixCache compares with no cache at all); a restart
// restores them from the SSD.
func TestPrefixCacheRecurrent(t *testing.T) {
	models := t.TempDir()
	demotest.Create(t, filepath.Join(models, nodetest.Model), demo.Options{Arch: "qwen3_5_moe", Layers: 4, Hidden: 64, Heads: 4,
		KVHeads: 2, HeadDim: 16, Intermediate: 128, Experts: 4, ExpertsPerTok: 2, MoEIntermediate: 32, Seed: 12})
	content := longPrompt()
	data := t.TempDir()
	a := nodetest.Start(t, nodetest.Options{ModelsDir: models, DataDir: data})
	base := chatGreedy(t, a.URL(), content)
	// A restore ends on the deepest snapshot (every
	// DefaultCacheStateEvery blocks) before the prompt's last token,
	// which is computed.
	every := 64 * runner.DefaultCacheStateEvery
	wantCached := (base.Prompt - 1) / every * every
	if wantCached == 0 || base.Cached != 0 {
		t.Fatalf("cold run: a prompt of %d tokens, %d cached", base.Prompt, base.Cached)
	}
	hot := chatGreedy(t, a.URL(), content)
	sameOutput(t, "hot", hot, base)
	if hot.Cached != wantCached {
		t.Errorf("hot run: %d cached tokens, want %d", hot.Cached, wantCached)
	}
	stop(t, a)
	b := nodetest.Start(t, nodetest.Options{ModelsDir: models, DataDir: data})
	ssd := chatGreedy(t, b.URL(), content)
	sameOutput(t, "restored from the SSD", ssd, base)
	if s := b.Runner().CacheStats(); ssd.Cached != wantCached || s.DiskHits < int64(wantCached/64) || s.Corrupt != 0 {
		t.Errorf("SSD run: %d cached tokens, stats %+v; want %d", ssd.Cached, s, wantCached)
	}
}
