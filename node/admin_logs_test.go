package node_test

import (
	"bufio"
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fusion/internal/logfile"
	"fusion/node/nodetest"
)

// TestAdminLogsCluster: every node logs to <data-dir>/logs/server.log;
// any node tails another's (?node) with a level filter and streams its
// new lines as SSE over the cluster; the files hold no prompt, no
// completion and no key.
func TestAdminLogsCluster(t *testing.T) {
	dirs := map[string]string{}
	a, b, _ := startTrio(t, func(id string, o *nodetest.Options) {
		o.DataDir = t.TempDir()
		dirs[id] = o.DataDir
		f, err := logfile.Open(filepath.Join(o.DataDir, "logs"), logfile.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		o.Logs = f
		o.Logger = slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	const prompt, wrongKey = "PROMPT-canary-5521", "sk-wrong-canary-7788"
	code, answer := chatText(t, b, "demo", prompt, `,"temperature":0,"max_tokens":12`)
	if code != 200 || len(answer) < 4 {
		t.Fatalf("chat on b: %d %q", code, answer)
	}
	if code, _ := adminDoKey(t, b, wrongKey, http.MethodGet, "/v1/models?api_key="+wrongKey, ""); code != 401 {
		t.Fatalf("a wrong key: %d", code)
	}

	code, out := adminDo(t, a, http.MethodGet, "/admin/api/logs?node=b&lines=100", "")
	lines := strs(out["lines"])
	if code != 200 || out["node"] != "b" || len(lines) == 0 || !strings.Contains(strings.Join(lines, "\n"), `"path":"/v1/chat/completions"`) {
		t.Fatalf("b's log through a: %d %v", code, out)
	}
	code, out = adminDo(t, a, http.MethodGet, "/admin/api/logs?node=b&lines=3&level=debug", "")
	if code != 200 || len(strs(out["lines"])) != 3 {
		t.Errorf("3 lines of b: %d %v", code, out)
	}
	code, out = adminDo(t, b, http.MethodGet, "/admin/api/logs?lines=1000&level=error", "")
	for _, l := range strs(out["lines"]) {
		if !strings.Contains(l, `"level":"ERROR"`) {
			t.Errorf("level filter let through: %s", l)
		}
	}
	for _, q := range []struct{ query, param string }{{"lines=0", "lines"}, {"lines=x", "lines"}, {"lines=10001", "lines"}, {"level=loud", "level"}} {
		if code, out := adminDo(t, a, http.MethodGet, "/admin/api/logs?"+q.query, ""); code != 400 || errParam(out) != q.param {
			t.Errorf("%s: %d %v", q.query, code, out)
		}
	}

	// b's new lines, streamed through a.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.URL()+"/admin/api/logs/stream?node=b&level=info", nil)
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "data: ") && strings.Contains(l, `"path":"/v1/models/demo"`) {
				found <- l
				return
			}
		}
	}()
	for {
		// The stream may start after a request; send until one shows.
		adminDo(t, b, http.MethodGet, "/v1/models/demo", "")
		select {
		case <-found:
		case <-time.After(200 * time.Millisecond):
			if ctx.Err() != nil {
				t.Fatal("b's line never streamed through a")
			}
			continue
		}
		break
	}
	cancel()

	// Nothing of a request's content or keys in any node's files.
	for id, dir := range dirs {
		des, err := os.ReadDir(filepath.Join(dir, "logs"))
		if err != nil || len(des) == 0 {
			t.Fatalf("%s's logs: %v", id, err)
		}
		for _, de := range des {
			raw, _ := os.ReadFile(filepath.Join(dir, "logs", de.Name()))
			for _, secret := range []string{prompt, wrongKey, answer, "Bearer k"} {
				if strings.Contains(string(raw), secret) {
					t.Errorf("%s's %s contains %q", id, de.Name(), secret)
				}
			}
		}
	}
}
