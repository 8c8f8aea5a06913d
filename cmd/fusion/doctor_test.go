package main

import (
	"context"
	"encoding/json"
	"fusion/internal/testenv"
	"io"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"fusion/engine/demo"
)

// doctorReport runs fusion doctor --json with args and returns its exit
// status and the report by check name.
func doctorReport(t *testing.T, args ...string) (int, map[string]checkResult) {
	t.Helper()
	var out, errb strings.Builder
	code := run(context.Background(), append([]string{"doctor", "--json"}, args...), &out, &errb)
	var rs []checkResult
	if err := json.Unmarshal([]byte(out.String()), &rs); err != nil {
		t.Fatalf("doctor output %q (%s): %v", out.String(), errb.String(), err)
	}
	m := map[string]checkResult{}
	for _, r := range rs {
		m[r.Check] = r
	}
	return code, m
}

func TestDoctor(t *testing.T) {
	dir := t.TempDir()
	if _, err := demo.Create(filepath.Join(dir, "models", "demo"), demo.DefaultOptions()); err != nil {
		t.Fatal(err)
	}
	// A port that is taken: fail, with a fix; everything else checked.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	code, r := doctorReport(t, "--data-dir", dir, "--listen", busy.Addr().String())
	if code != 1 || r["port http"].Status != "fail" || !strings.Contains(r["port http"].Fix, "already running") {
		t.Errorf("busy port: exit %d, %+v", code, r["port http"])
	}
	for check, want := range map[string]string{"settings": "ok", "data dir": "ok", "models dir": "ok", "disk": "", "memory": "ok", "models": "ok"} {
		if got := r[check]; got.Status == "" || (want != "" && got.Status != want) {
			t.Errorf("%s: %+v, want %s", check, got, want)
		}
	}
	if !strings.Contains(r["models"].Detail, "demo") {
		t.Errorf("models: %+v", r["models"])
	}
	if _, ok := r["mlx"]; !ok {
		t.Error("no MLX check")
	}
	// Bad settings fail at once, naming the setting.
	code, r = doctorReport(t, "--data-dir", dir, "--threads", "many")
	if code != 1 || r["settings"].Status != "fail" || !strings.Contains(r["settings"].Detail, "threads") {
		t.Errorf("bad settings: exit %d, %+v", code, r["settings"])
	}

	// A running node: its health and (alone) no cluster; its own ports are
	// not reported as taken.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr testenv.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dir, "--threads", "1"}, io.Discard, &stderr)
	}()
	var url string
	for deadline := time.Now().Add(20 * time.Second); url == ""; time.Sleep(10 * time.Millisecond) {
		if m := regexp.MustCompile(`serving on (http://\S+)`).FindStringSubmatch(stderr.String()); m != nil {
			url = m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no address: %s", stderr.String())
		}
	}
	code, r = doctorReport(t, "--data-dir", dir, "--listen", strings.TrimPrefix(url, "http://"), "--addr", url)
	if code != 0 || r["node"].Status != "ok" || r["cluster"].Detail != "a lone node (not clustered)" {
		t.Errorf("running node: exit %d, %+v %+v", code, r["node"], r["cluster"])
	}
	if _, ok := r["port http"]; ok {
		t.Errorf("the running node's own port was checked: %+v", r["port http"])
	}
	cancel()
	<-done
	// Nothing answers there now.
	code, r = doctorReport(t, "--data-dir", dir, "--listen", "127.0.0.1:0", "--addr", url)
	if code != 1 || r["node"].Status != "fail" {
		t.Errorf("stopped node: exit %d, %+v", code, r["node"])
	}
}
