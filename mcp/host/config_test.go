package host

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	env := map[string]string{"TOKEN": "s3cr3t", "ROOT": "/srv"}
	getenv := func(k string) string { return env[k] }
	for _, tc := range []struct {
		name, doc string
		check     func(t *testing.T, c Config)
		err       string // substring of the error; "" = valid
	}{
		{"stdio and http", `{"mcpServers": {
			"z-fs": {"command": "npx", "args": ["-y", "pkg", "${ROOT}/notes"], "env": {"API_KEY": "k-${TOKEN}"}, "cwd": "${ROOT}"},
			"a-web": {"url": "https://h.example/mcp?x=${TOKEN}", "headers": {"Authorization": "Bearer ${TOKEN}"}}}}`,
			func(t *testing.T, c Config) {
				if len(c.Servers) != 2 || c.Servers[0].Name != "a-web" || c.Servers[1].Name != "z-fs" {
					t.Fatalf("order: %+v", c.Servers)
				}
				web, fs := c.Servers[0], c.Servers[1]
				if web.Transport() != TransportHTTP || web.URL != "https://h.example/mcp?x=s3cr3t" || web.Headers["Authorization"] != "Bearer s3cr3t" {
					t.Errorf("web: %+v", web)
				}
				if fs.Transport() != TransportStdio || fs.Args[2] != "/srv/notes" || fs.Env["API_KEY"] != "k-s3cr3t" || fs.Cwd != "/srv" {
					t.Errorf("fs: %+v", fs)
				}
			}, ""},
		{"sse", `{"mcpServers": {"old": {"url": "http://127.0.0.1:1/sse", "type": "sse"}}}`,
			func(t *testing.T, c Config) {
				if c.Servers[0].Transport() != TransportSSE {
					t.Errorf("transport %s", c.Servers[0].Transport())
				}
			}, ""},
		{"streamable-http spelling", `{"mcpServers": {"h": {"url": "http://x/mcp", "type": "streamable-http"}}}`,
			func(t *testing.T, c Config) {
				if c.Servers[0].Transport() != TransportHTTP {
					t.Errorf("transport %s", c.Servers[0].Transport())
				}
			}, ""},
		{"empty set", `{"mcpServers": {}}`, func(t *testing.T, c Config) {
			if len(c.Servers) != 0 {
				t.Errorf("%+v", c)
			}
		}, ""},
		{"nodes", `{"mcpServers": {"fs": {"command": "a", "nodes": ["mac-1", "mac-2"]}, "web": {"url": "http://x"}}}`,
			func(t *testing.T, c Config) {
				fs, web := c.Servers[0], c.Servers[1]
				if !fs.RunsOn("mac-2") || fs.RunsOn("mac-3") || !web.RunsOn("mac-3") {
					t.Errorf("nodes: %+v %+v", fs, web)
				}
			}, ""},
		{"empty nodes", `{"mcpServers": {"x": {"command": "a", "nodes": []}}}`, nil, `"nodes" is empty`},
		{"blank node", `{"mcpServers": {"x": {"command": "a", "nodes": [" "]}}}`, nil, `empty node id`},
		{"nodes not a list", `{"mcpServers": {"x": {"command": "a", "nodes": "mac-1"}}}`, nil, `nodes`},
		{"not json", `{`, nil, "unexpected end"},
		{"no mcpServers", `{"servers": {}}`, nil, `no "mcpServers"`},
		{"neither", `{"mcpServers": {"x": {}}}`, nil, `give "command" (stdio) or "url"`},
		{"both", `{"mcpServers": {"x": {"command": "a", "url": "http://b"}}}`, nil, "not both"},
		{"headers on a command", `{"mcpServers": {"x": {"command": "a", "headers": {"A": "b"}}}}`, nil, `"headers" belong to a "url"`},
		{"env on a url", `{"mcpServers": {"x": {"url": "http://b", "env": {"A": "b"}}}}`, nil, `belong to a "command"`},
		{"bad scheme", `{"mcpServers": {"x": {"url": "ftp://b"}}}`, nil, "http:// or https://"},
		{"bad type", `{"mcpServers": {"x": {"url": "http://b", "type": "websocket"}}}`, nil, `type "websocket"`},
		{"unknown field", `{"mcpServers": {"x": {"command": "a", "argz": []}}}`, nil, `unknown field "argz"`},
		{"bad name", `{"mcpServers": {"a b": {"command": "a"}}}`, nil, `server name "a b"`},
		{"double underscore", `{"mcpServers": {"a__b": {"command": "a"}}}`, nil, `no "__"`},
		{"unset variable", `{"mcpServers": {"x": {"command": "a", "env": {"K": "${NOPE}"}}}}`, nil, "NOPE is not set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.doc), getenv)
			if tc.err != "" {
				var ce *ConfigError
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.As(err, &ce) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "s3cr3t") {
					t.Errorf("the error shows a secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func TestLoadConfigNamesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(path, []byte(`{"mcpServers": {"x": {}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(path, os.Getenv); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("err %v does not name the file", err)
	}
	if _, err := LoadConfig(filepath.Join(t.TempDir(), "none.json"), os.Getenv); err == nil {
		t.Error("a missing file was accepted")
	}
}

// TestSecretsNotLogged: a server's env and headers appear in no log line
// and no status, whatever happens to it.
func TestSecretsNotLogged(t *testing.T) {
	const secret = "tok-9f8e7d6c"
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := New(Config{Servers: []ServerConfig{
		// A server that prints its secret on stderr: the line is logged
		// and kept for the failure message, with the secret hidden.
		{Name: "cmd", Command: "/bin/sh", Args: []string{"-c", "echo starting with key $API_KEY >&2; exit 1"}, Env: map[string]string{"API_KEY": secret}},
		// Go's HTTP errors quote the URL, query and all.
		{Name: "web", URL: "http://127.0.0.1:1/mcp?key=" + secret, Headers: map[string]string{"Authorization": "Bearer " + secret}},
	}}, Options{Logger: logger, MinBackoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		st := h.Servers()
		if st[0].Restarts >= 2 && st[1].Restarts >= 2 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, _, callErr := h.Call(context.Background(), "web__x", map[string]any{})
	statuses := h.Servers()
	_ = h.Close()
	if statuses[0].State != StateFailed && statuses[0].State != StateStarting {
		t.Errorf("cmd state %s", statuses[0].State)
	}
	slog.New(logger.Handler()).Info("config", "server", ServerConfig{Name: "cmd", Env: map[string]string{"API_KEY": secret}})
	if !strings.Contains(statuses[1].LastError, "127.0.0.1:1/mcp?REDACTED") {
		t.Errorf("the web server's error does not name its (redacted) URL: %s", statuses[1].LastError)
	}
	for what, text := range map[string]string{"logs": logs.String(), "status": strings.Join([]string{statuses[0].LastError, statuses[1].LastError}, " "), "call error": callErr.Error()} {
		if strings.Contains(text, secret) {
			t.Errorf("%s show the secret: %s", what, text)
		}
	}
	if !strings.Contains(logs.String(), "starting with key [redacted]") || !strings.Contains(statuses[0].LastError, "starting with key [redacted]") {
		t.Errorf("the server's stderr is not in the log:\n%s", logs.String())
	}
}

func TestTailWriterKeepsTheEnd(t *testing.T) {
	var logs bytes.Buffer
	w := newTailWriter(16, slog.New(slog.NewTextHandler(&logs, nil)), func(s string) string { return s })
	for _, s := range []string{"first line\n", "second ", "line\nthird line that is long\n"} {
		if _, err := w.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.Tail(); got != "ne that is long" { // the last 16 bytes, trimmed
		t.Errorf("tail %q", got)
	}
	for _, line := range []string{`line="first line"`, `line="second line"`, `line="third line that is long"`} {
		if !strings.Contains(logs.String(), line) {
			t.Errorf("log lacks %s:\n%s", line, logs.String())
		}
	}
}
