package host

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"fusion/mcp/host/mcptest"
)

// everything is a stdio entry running the real server-everything.
func everything(t *testing.T, name string) ServerConfig {
	node, script := mcptest.Everything(t)
	return ServerConfig{Name: name, Command: node, Args: []string{script, "stdio"}}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func newHost(t *testing.T, opts Options, servers ...ServerConfig) *Host {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	h := New(Config{Servers: servers}, opts)
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// waitState waits until server name is in state want and returns its status.
func waitState(t *testing.T, h *Host, name string, want State, timeout time.Duration) ServerStatus {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last ServerStatus
	for time.Now().Before(deadline) {
		for _, st := range h.Servers() {
			if st.Name == name {
				last = st
			}
		}
		if last.State == want {
			return last
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("server %s: state %s after %v, want %s (last error %q)", name, last.State, timeout, want, last.LastError)
	return last
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		return len(f) > 0 && f[0] != "Z" && f[0] != "X"
	} else if _, err := os.Stat("/proc/self"); err == nil {
		return false // /proc exists but not this pid
	}
	return syscall.Kill(pid, 0) == nil
}

func contentJSON(t *testing.T, c mcp.Content) map[string]any {
	t.Helper()
	b, err := c.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestEverythingStdio(t *testing.T) {
	h := newHost(t, Options{}, everything(t, "ev"))
	st := waitState(t, h, "ev", StateReady, 30*time.Second)
	if st.ToolCount < 10 || st.PID == 0 || st.Transport != TransportStdio {
		t.Fatalf("status %+v: want ≥ 10 tools, a pid, stdio", st)
	}
	names := map[string]Tool{}
	for _, tl := range h.Tools() {
		names[tl.Name] = tl
	}
	for _, want := range []string{"echo", "get-sum", "get-tiny-image", "get-resource-links", "get-resource-reference", "get-structured-content", "trigger-long-running-operation"} {
		tl, ok := names[want]
		if !ok {
			t.Fatalf("tool %s not listed (have %d tools)", want, len(names))
		}
		if tl.Server != "ev" || tl.ServerTool != want || tl.InputSchema == nil {
			t.Errorf("tool %s: %+v", want, tl)
		}
	}
	ctx := context.Background()
	call := func(name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		res, _, err := h.Call(ctx, name, args)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return res
	}

	res := call("echo", map[string]any{"message": "héllo"})
	if got := contentJSON(t, res.Content[0]); got["type"] != "text" || got["text"] != "Echo: héllo" || res.IsError {
		t.Errorf("echo: %v (is_error %v)", got, res.IsError)
	}
	res = call("get-sum", map[string]any{"a": 2, "b": 3.5})
	if got := contentJSON(t, res.Content[0]); !strings.Contains(got["text"].(string), "5.5") {
		t.Errorf("get-sum: %v", got)
	}
	res = call("get-tiny-image", nil)
	var image map[string]any
	for _, c := range res.Content {
		if m := contentJSON(t, c); m["type"] == "image" {
			image = m
		}
	}
	if image == nil || image["mimeType"] != "image/png" {
		t.Fatalf("get-tiny-image: no PNG image content: %v", res.Content)
	}
	png, _ := base64.StdEncoding.DecodeString(image["data"].(string))
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Errorf("image data is not a PNG: %q", png[:min(8, len(png))])
	}
	res = call("get-resource-links", map[string]any{"count": 2})
	links := 0
	for _, c := range res.Content {
		if l, ok := c.(*mcp.ResourceLink); ok {
			links++
			if !strings.HasPrefix(l.URI, "demo://") || l.Name == "" {
				t.Errorf("resource link %+v", l)
			}
		}
	}
	if links != 2 {
		t.Errorf("get-resource-links count 2: %d links in %d items", links, len(res.Content))
	}
	res = call("get-resource-reference", map[string]any{"resourceType": "Text", "resourceId": 3})
	var embedded *mcp.EmbeddedResource
	for _, c := range res.Content {
		if e, ok := c.(*mcp.EmbeddedResource); ok {
			embedded = e
		}
	}
	if embedded == nil || embedded.Resource == nil || !strings.Contains(embedded.Resource.URI, "3") || embedded.Resource.Text == "" {
		t.Errorf("get-resource-reference: %+v", res.Content)
	}
	res = call("get-structured-content", map[string]any{"location": "New York"})
	sc, ok := res.StructuredContent.(map[string]any)
	if !ok || sc["temperature"] == nil || sc["conditions"] == nil {
		t.Errorf("structured content %#v", res.StructuredContent)
	}
	// A tool that throws is a tool error: a result with IsError, not a Go error.
	res = call("get-resource-reference", map[string]any{"resourceType": "Text", "resourceId": -1})
	if !res.IsError || !strings.Contains(contentJSON(t, res.Content[0])["text"].(string), "resourceId") {
		t.Errorf("a thrown tool error: is_error %v, %v", res.IsError, res.Content)
	}

	// Arguments are checked against the input schema before the call.
	for _, tc := range []struct {
		tool string
		args map[string]any
		path string
	}{
		{"get-sum", map[string]any{"a": 1}, "arguments.b"},
		{"get-sum", map[string]any{"a": "one", "b": 2}, "arguments.a"},
		{"echo", map[string]any{"message": 7}, "arguments.message"},
	} {
		_, _, err := h.Call(ctx, tc.tool, tc.args)
		var ae *ArgumentError
		if !errors.As(err, &ae) || ae.Path != tc.path {
			t.Errorf("%s %v: %v, want an ArgumentError at %s", tc.tool, tc.args, err, tc.path)
		}
	}
	if _, _, err := h.Call(ctx, "no-such-tool", nil); !errors.Is(err, ErrToolNotFound) {
		t.Errorf("unknown tool: %v", err)
	}
	// The qualified name works for a tool that does not collide.
	if res := call("ev__echo", map[string]any{"message": "q"}); contentJSON(t, res.Content[0])["text"] != "Echo: q" {
		t.Errorf("ev__echo: %v", res.Content)
	}
}

func TestEnvInterpolationReachesChild(t *testing.T) {
	node, script := mcptest.Everything(t)
	raw := fmt.Sprintf(`{"mcpServers": {"ev": {"command": %q, "args": [%q, "stdio"], "env": {"FUSION_TEST_TOKEN": "tok-${SECRET_PART}"}}}}`, node, script)
	cfg, err := ParseConfig([]byte(raw), func(k string) string { return map[string]string{"SECRET_PART": "s3cr3t"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(t, Options{}, cfg.Servers...)
	waitState(t, h, "ev", StateReady, 30*time.Second)
	res, _, err := h.Call(context.Background(), "get-env", nil)
	if err != nil {
		t.Fatal(err)
	}
	if text := contentJSON(t, res.Content[0])["text"].(string); !strings.Contains(text, `"FUSION_TEST_TOKEN": "tok-s3cr3t"`) {
		t.Errorf("the child's environment lacks the interpolated value: %.300s", text)
	}
}

func TestFilesystemReadsTestFile(t *testing.T) {
	node, script := mcptest.Filesystem(t)
	dir := mcptest.Files(t, "written by the test\n")
	h := newHost(t, Options{}, ServerConfig{Name: "fs", Command: node, Args: []string{script, dir}})
	waitState(t, h, "fs", StateReady, 30*time.Second)
	res, _, err := h.Call(context.Background(), "read_text_file", map[string]any{"path": filepath.Join(dir, "note.txt")})
	if err != nil {
		t.Fatal(err)
	}
	if got := contentJSON(t, res.Content[0]); got["text"] != "written by the test\n" || res.IsError {
		t.Errorf("read_text_file: %v", got)
	}
	res, _, err = h.Call(context.Background(), "read_media_file", map[string]any{"path": filepath.Join(dir, "beep.wav")})
	if err != nil {
		t.Fatal(err)
	}
	a, ok := res.Content[0].(*mcp.AudioContent)
	if !ok || a.MIMEType != "audio/wav" || string(a.Data) != string(mcptest.WAV) {
		t.Errorf("read_media_file: %#v", res.Content[0])
	}
	// Outside the allowed directory: the server's own error, as a tool error.
	res, _, err = h.Call(context.Background(), "read_text_file", map[string]any{"path": "/etc/hostname"})
	if err != nil || !res.IsError {
		t.Errorf("outside the root: err %v, is_error %v", err, res != nil && res.IsError)
	}
}

func TestKilledMidCallRestarts(t *testing.T) {
	h := newHost(t, Options{MinBackoff: 50 * time.Millisecond}, everything(t, "ev"))
	first := waitState(t, h, "ev", StateReady, 30*time.Second)
	errc := make(chan error, 1)
	go func() {
		_, _, err := h.Call(context.Background(), "trigger-long-running-operation", map[string]any{"duration": 30, "steps": 30})
		errc <- err
	}()
	time.Sleep(time.Second) // the call is in flight (it lasts 30 s)
	killed := time.Now()
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-errc:
		t.Logf("the call failed %v after the kill: %v", time.Since(killed), err)
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not end when its server died")
	}
	var ce *CallError
	if !errors.As(err, &ce) || ce.Timeout || ce.Server != "ev" {
		t.Fatalf("call during the kill: %v, want a CallError", err)
	}
	if !strings.Contains(err.Error(), "killed") {
		t.Errorf("the error does not say the server was killed: %v", err)
	}
	var again ServerStatus
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if again = h.Servers()[0]; again.State == StateReady && again.PID != first.PID {
			break
		}
	}
	t.Logf("ready again %v after the kill (new pid %d)", time.Since(killed), again.PID)
	if again.State != StateReady || again.PID == first.PID || again.Restarts < 1 || !strings.Contains(again.LastError, "killed") {
		t.Errorf("after the restart: %+v (first pid %d)", again, first.PID)
	}
	if alive(first.PID) {
		t.Errorf("the killed server's process %d is still there", first.PID)
	}
	res, _, err := h.Call(context.Background(), "echo", map[string]any{"message": "back"})
	if err != nil || contentJSON(t, res.Content[0])["text"] != "Echo: back" {
		t.Fatalf("after the restart: %v %v", err, res)
	}
}

func TestCallTimeout(t *testing.T) {
	h := newHost(t, Options{CallTimeout: 300 * time.Millisecond, TerminateGrace: 5 * time.Second}, everything(t, "ev"))
	waitState(t, h, "ev", StateReady, 30*time.Second)
	began := time.Now()
	_, _, err := h.Call(context.Background(), "trigger-long-running-operation", map[string]any{"duration": 5, "steps": 5})
	var ce *CallError
	if !errors.As(err, &ce) || !ce.Timeout {
		t.Fatalf("a 5 s call with a 300 ms timeout: %v", err)
	}
	// It ended at the timeout, not after waiting for the (live) process
	// to exit: a 5 s bound, far above 300 ms and equal to the op's length.
	if took := time.Since(began); took >= 5*time.Second {
		t.Errorf("the timed-out call took %v", took)
	}
	// The session survives a timed-out call.
	if _, _, err := h.Call(context.Background(), "echo", map[string]any{"message": "x"}); err != nil {
		t.Fatal(err)
	}
}

func TestNeverStarts(t *testing.T) {
	h := newHost(t, Options{MinBackoff: 100 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
		ServerConfig{Name: "broken", Command: "/bin/sh", Args: []string{"-c", "echo 'cannot open database: no such file' >&2; exit 3"}},
		ServerConfig{Name: "missing", Command: "/nonexistent/mcp-server"},
	)
	st := waitState(t, h, "broken", StateFailed, 10*time.Second)
	if !strings.Contains(st.LastError, "cannot open database: no such file") || !strings.Contains(st.LastError, "exit status 3") {
		t.Errorf("failed server's error %q lacks its stderr or exit status", st.LastError)
	}
	st = waitState(t, h, "missing", StateFailed, 10*time.Second)
	if !strings.Contains(st.LastError, "/nonexistent/mcp-server") {
		t.Errorf("missing command's error: %q", st.LastError)
	}
	// It keeps being retried with backoff.
	deadline := time.Now().Add(5 * time.Second)
	for h.Servers()[0].Restarts < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if r := h.Servers()[0].Restarts; r < 2 {
		t.Errorf("restarts %d, want ≥ 2", r)
	}
	if _, _, err := h.Call(context.Background(), "broken__anything", nil); !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "cannot open database") {
		t.Errorf("call on a failed server: %v", err)
	}
}

func TestCloseLeavesNoProcess(t *testing.T) {
	node, script := mcptest.Everything(t)
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	// A wrapper that leaves a grandchild behind, as npx does.
	wrapper := fmt.Sprintf("sleep 300 & echo $! > %s; exec %s %s stdio", pidFile, node, script)
	h := New(Config{Servers: []ServerConfig{{Name: "ev", Command: "/bin/sh", Args: []string{"-c", wrapper}}}},
		Options{Logger: testLogger(t), TerminateGrace: 200 * time.Millisecond})
	st := waitState(t, h, "ev", StateReady, 30*time.Second)
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	grandchild, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if !alive(st.PID) || !alive(grandchild) {
		t.Fatalf("before Close: server %d alive %v, grandchild %d alive %v", st.PID, alive(st.PID), grandchild, alive(grandchild))
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if got := h.Servers()[0].State; got != StateStopped {
		t.Errorf("state after Close: %s", got)
	}
	deadline := time.Now().Add(2 * time.Second)
	for (alive(st.PID) || alive(grandchild)) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(st.PID) || alive(grandchild) {
		t.Errorf("after Close: server %d alive %v, grandchild %d alive %v", st.PID, alive(st.PID), grandchild, alive(grandchild))
	}
}

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestEverythingOverHTTP(t *testing.T) {
	node, script := mcptest.Everything(t)
	for _, tc := range []struct{ mode, typ, path string }{
		{"streamableHttp", "", "/mcp"},
		{"sse", "sse", "/sse"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			port := freePort(t)
			srv := exec.Command(node, script, tc.mode)
			srv.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = srv.Process.Kill()
				_ = srv.Wait()
			})
			h := newHost(t, Options{MinBackoff: 100 * time.Millisecond, MaxBackoff: 500 * time.Millisecond},
				ServerConfig{Name: "remote", URL: fmt.Sprintf("http://127.0.0.1:%d%s", port, tc.path), Type: tc.typ,
					Headers: map[string]string{"Authorization": "Bearer not-logged"}})
			st := waitState(t, h, "remote", StateReady, 30*time.Second)
			want := TransportHTTP
			if tc.typ == "sse" {
				want = TransportSSE
			}
			if st.Transport != want || st.ToolCount < 10 {
				t.Errorf("status %+v", st)
			}
			res, _, err := h.Call(context.Background(), "echo", map[string]any{"message": tc.mode})
			if err != nil || contentJSON(t, res.Content[0])["text"] != "Echo: "+tc.mode {
				t.Fatalf("echo over %s: %v %v", tc.mode, err, res)
			}
		})
	}
}

// TestStartTimeout: a server that never answers initialize is failed
// after the start timeout, saying so, and its process is gone.
func TestStartTimeout(t *testing.T) {
	h := newHost(t, Options{StartTimeout: 300 * time.Millisecond, MinBackoff: time.Minute, TerminateGrace: 100 * time.Millisecond},
		ServerConfig{Name: "mute", Command: "/bin/sh", Args: []string{"-c", "echo $$ >&2; exec sleep 60"}})
	st := waitState(t, h, "mute", StateFailed, 10*time.Second)
	if !strings.Contains(st.LastError, "no answer within the start timeout (300ms)") {
		t.Errorf("error %q", st.LastError)
	}
	// The shell printed its pid (then became sleep): it must be gone.
	fields := strings.Fields(st.LastError[strings.Index(st.LastError, "stderr: ")+len("stderr: "):])
	pid, err := strconv.Atoi(fields[0])
	if err != nil {
		t.Fatalf("no pid in %q", st.LastError)
	}
	if alive(pid) {
		t.Errorf("process %d of a server that timed out is still there", pid)
	}
}

// TestHTTPServerGoneReconnects: a streamable HTTP server that goes away
// fails the call in flight or the next one with a CallError, the host
// leaves ready and keeps reconnecting with backoff, and once the server
// is back on its address the tools work again.
func TestHTTPServerGoneReconnects(t *testing.T) {
	node, script := mcptest.Everything(t)
	port := freePort(t)
	start := func() *exec.Cmd {
		srv := exec.Command(node, script, "streamableHttp")
		srv.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = srv.Process.Kill()
			_ = srv.Wait()
		})
		return srv
	}
	srv := start()
	h := newHost(t, Options{MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
		ServerConfig{Name: "remote", URL: fmt.Sprintf("http://127.0.0.1:%d/mcp", port)})
	waitState(t, h, "remote", StateReady, 30*time.Second)
	if _, _, err := h.Call(context.Background(), "echo", map[string]any{"message": "1"}); err != nil {
		t.Fatal(err)
	}
	_ = srv.Process.Kill()
	_ = srv.Wait()
	_, _, err := h.Call(context.Background(), "echo", map[string]any{"message": "2"})
	var ce *CallError
	if !errors.As(err, &ce) || ce.Timeout {
		t.Fatalf("call to a server that is gone: %v", err)
	}
	st := waitState(t, h, "remote", StateFailed, 10*time.Second)
	if !strings.Contains(st.LastError, "connection refused") {
		t.Errorf("failed because %q", st.LastError)
	}
	start()
	var back ServerStatus
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if back = h.Servers()[0]; back.State == StateReady {
			break
		}
	}
	if back.State != StateReady || back.Restarts < 1 {
		t.Fatalf("after the server came back: %+v", back)
	}
	res, _, err := h.Call(context.Background(), "echo", map[string]any{"message": "3"})
	if err != nil || contentJSON(t, res.Content[0])["text"] != "Echo: 3" {
		t.Fatalf("after reconnecting: %v %v", err, res)
	}
}
