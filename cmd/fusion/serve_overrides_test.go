package main

import (
	"context"
	"encoding/json"
	"fusion/internal/testenv"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"fusion/engine/demo"
)

// startServe runs `fusion serve` with args as main does and returns its
// URL and a function that stops it (SIGTERM's path) and returns its logs.
func startServe(t *testing.T, args ...string) (string, func() string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stderr testenv.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"serve"}, args...), io.Discard, &stderr) }()
	var url string
	for deadline := time.Now().Add(20 * time.Second); url == ""; time.Sleep(10 * time.Millisecond) {
		if m := regexp.MustCompile(`serving on (http://\S+)`).FindStringSubmatch(stderr.String()); m != nil {
			url = m[1]
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no address in the output: %s", stderr.String())
		}
	}
	stopped := false
	stop := func() string {
		if !stopped {
			stopped = true
			cancel()
			select {
			case code := <-done:
				if code != 0 {
					t.Errorf("exit status %d: %s", code, stderr.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatal("serve did not stop")
			}
		}
		return stderr.String()
	}
	t.Cleanup(func() { stop() })
	return url, stop
}

// globalRows reads GET /admin/api/global-settings as key → row.
func globalRows(t *testing.T, url string) map[string]map[string]any {
	t.Helper()
	resp, err := http.Get(url + "/admin/api/global-settings")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Settings []map[string]any `json:"settings"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("global settings: %d %v", resp.StatusCode, err)
	}
	rows := map[string]map[string]any{}
	for _, r := range out.Settings {
		rows[r["key"].(string)] = r
	}
	return rows
}

// TestServeStoredOverrides: a replicated override of a setting that needs
// a restart is in force after the restart (and no longer reported as
// restart_required), except where the node's own flag sets that value.
func TestServeStoredOverrides(t *testing.T) {
	dir := t.TempDir()
	if _, err := demo.Create(filepath.Join(dir, "models", "demo"), demo.DefaultOptions()); err != nil {
		t.Fatal(err)
	}
	args := []string{"--listen", "127.0.0.1:0", "--data-dir", dir, "--threads", "1", "--log-format", "json", "--max-tokens", "55"}
	url, stop := startServe(t, args...)
	resp, err := http.Post(url+"/admin/api/global-settings", "application/json",
		strings.NewReader(`{"max_queued": 7, "max_tokens": 77, "idle_ttl": "bogus"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("a bad idle_ttl: %d, want 400", resp.StatusCode)
	}
	resp, err = http.Post(url+"/admin/api/global-settings", "application/json", strings.NewReader(`{"max_queued": 7, "max_tokens": 77}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"restart_required":["max_queued","max_tokens"]`) {
		t.Fatalf("change: %d %s", resp.StatusCode, body)
	}
	type want struct {
		value, source, cluster string
		restart                bool
	}
	check := func(when string, rows map[string]map[string]any, w map[string]want) {
		t.Helper()
		for k, w := range w {
			r := rows[k]
			cv, _ := r["cluster_value"].(string)
			rr, _ := r["restart_required"].(bool)
			if r["value"] != w.value || r["source"] != w.source || cv != w.cluster || rr != w.restart {
				t.Errorf("%s: %s = %v, want value %s source %s cluster_value %q restart_required %v", when, k, r, w.value, w.source, w.cluster, w.restart)
			}
		}
	}
	check("before the restart", globalRows(t, url), map[string]want{
		"max_queued":  {"7", "cluster", "", true},
		"max_tokens":  {"55", "flag", "77", false}, // the flag wins, now and later
		"max_running": {"16", "default", "", false},
	})
	stop()

	url, stop = startServe(t, args...)
	check("after the restart", globalRows(t, url), map[string]want{
		"max_queued":  {"7", "cluster", "", false},
		"max_tokens":  {"55", "flag", "77", false},
		"max_running": {"16", "default", "", false},
	})
	if logs := stop(); !strings.Contains(logs, `"msg":"cluster settings in force from the last run","keys":["max_queued"]`) {
		t.Errorf("the start does not say which cluster settings it took: %s", logs)
	}
}

// TestServeApplyOverrides: only settings left at their defaults take an
// override; the data dir and secrets never do; a value the flag's parser
// refuses is reported and the default stays.
func TestServeApplyOverrides(t *testing.T) {
	s, err := resolveServe([]string{"--max-tokens", "50", "--data-dir", t.TempDir()}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	dataDir := s.cfg.DataDir
	applied, refused := s.applyOverrides(map[string]string{
		"max_queued": "9", "max_tokens": "70", "data_dir": "/elsewhere", "api_key": "stolen", "max_running": "zero",
	})
	if strings.Join(applied, ",") != "max_queued" || len(refused) != 1 || !strings.HasPrefix(refused[0], `max_running="zero"`) {
		t.Fatalf("applied %v, refused %v", applied, refused)
	}
	if s.cfg.MaxQueued != 9 || s.cfg.MaxTokens != 50 || s.cfg.DataDir != dataDir || s.cfg.APIKey != "" || s.cfg.MaxRunning != 16 {
		t.Errorf("config after the overrides: queued %d tokens %d dir %s key %q running %d", s.cfg.MaxQueued, s.cfg.MaxTokens, s.cfg.DataDir, s.cfg.APIKey, s.cfg.MaxRunning)
	}
}
