package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"fusion/mcp/host/mcptest"
)

// TestUpdate changes a running host's configuration: a server whose entry
// is unchanged keeps its process, a changed one is restarted with the new
// entry, a dropped one's process is gone when Update returns, an added one
// becomes ready, and an entry as written is resolved with Options.Getenv
// (a variable missing on this node fails that server alone).
func TestUpdate(t *testing.T) {
	node, script := mcptest.Everything(t)
	entry := func(env string) string {
		return fmt.Sprintf(`{"command": %q, "args": [%q, "stdio"], "env": {"FUSION_TEST_TOKEN": %q}}`, node, script, env)
	}
	parse := func(servers map[string]string) Config {
		var parts []string
		for name, e := range servers {
			parts = append(parts, fmt.Sprintf("%q: %s", name, e))
		}
		cfg, err := ParseRaw([]byte(`{"mcpServers": {` + strings.Join(parts, ",") + `}}`))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	env := map[string]string{"TOKEN": "tok-1"}
	h := newHost(t, Options{Getenv: func(k string) string { return env[k] }, TerminateGrace: 500 * time.Millisecond},
		parse(map[string]string{"keep": entry("a"), "change": entry("${TOKEN}"), "drop": entry("c")}).Servers...)
	keep := waitState(t, h, "keep", StateReady, 30*time.Second)
	change := waitState(t, h, "change", StateReady, 30*time.Second)
	drop := waitState(t, h, "drop", StateReady, 30*time.Second)
	getEnv := func(server string) string {
		res, _, err := h.Call(context.Background(), server+"__get-env", nil)
		if err != nil {
			t.Fatal(err)
		}
		return contentJSON(t, res.Content[0])["text"].(string)
	}
	if got := getEnv("change"); !strings.Contains(got, `"FUSION_TEST_TOKEN": "tok-1"`) {
		t.Fatalf("${TOKEN} not resolved with Options.Getenv: %.200s", got)
	}

	h.Update(parse(map[string]string{"keep": entry("a"), "change": entry("b-${TOKEN}"), "add": entry("d"), "unset": entry("${NOT_HERE}")}))
	if alive(drop.PID) {
		t.Errorf("the dropped server's process %d is alive after Update", drop.PID)
	}
	if alive(change.PID) {
		t.Errorf("the changed server's old process %d is alive after Update", change.PID)
	}
	if st := waitState(t, h, "keep", StateReady, time.Second); st.PID != keep.PID || st.Restarts != 0 {
		t.Errorf("the unchanged server was touched: pid %d → %d, restarts %d", keep.PID, st.PID, st.Restarts)
	}
	waitState(t, h, "add", StateReady, 30*time.Second)
	if st := waitState(t, h, "change", StateReady, 30*time.Second); st.PID == change.PID {
		t.Errorf("the changed server kept its process %d", st.PID)
	}
	if got := getEnv("change"); !strings.Contains(got, `"FUSION_TEST_TOKEN": "b-tok-1"`) {
		t.Errorf("the changed server runs the old entry: %.200s", got)
	}
	if st := waitState(t, h, "unset", StateFailed, time.Second); !strings.Contains(st.LastError, "NOT_HERE is not set") {
		t.Errorf("unset variable: %q", st.LastError)
	}
	var names []string
	for _, s := range h.Servers() {
		names = append(names, s.Name)
	}
	if strings.Join(names, " ") != "add change keep unset" {
		t.Errorf("servers after Update: %v", names)
	}
	if _, _, err := h.Call(context.Background(), "drop__echo", map[string]any{"message": "x"}); !errors.Is(err, ErrToolNotFound) {
		t.Errorf("a dropped server's tool: %v", err)
	}
	// Config is the configuration as written.
	doc, err := h.Config().Document(false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), `"FUSION_TEST_TOKEN":"b-${TOKEN}"`) {
		t.Errorf("Config is not as written: %s", doc)
	}

	// Everything gone: no process left.
	h.Update(Config{})
	for _, pid := range []int{keep.PID} {
		if alive(pid) {
			t.Errorf("process %d alive after an empty Update", pid)
		}
	}
	if len(h.Servers()) != 0 || len(h.Tools()) != 0 {
		t.Errorf("after an empty Update: %v", h.Servers())
	}
	_ = h.Close()
	h.Update(parse(map[string]string{"late": entry("x")})) // after Close: nothing starts
	if len(h.Servers()) != 0 {
		t.Errorf("Update after Close started %v", h.Servers())
	}
}

// TestMaskAndKeepSecrets: the shown document hides every env and header
// value; sent back, the masks take the stored values; a mask with nothing
// stored behind it is an error naming the field.
func TestMaskAndKeepSecrets(t *testing.T) {
	stored, err := ParseRaw([]byte(`{"mcpServers": {
		"fs": {"command": "npx", "args": ["-y", "fs"], "env": {"TOKEN": "s3cr3t-1", "REF": "${FROM_ENV}"}},
		"web": {"url": "https://h.example/mcp", "headers": {"Authorization": "Bearer s3cr3t-2"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	shown, err := stored.Document(true)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(shown), "s3cr3t") || strings.Contains(string(shown), "FROM_ENV") {
		t.Fatalf("a secret is shown: %s", shown)
	}
	var doc struct {
		MCPServers map[string]map[string]any `json:"mcpServers"`
	}
	if err := json.Unmarshal(shown, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.MCPServers["fs"]["env"].(map[string]any)["TOKEN"] != SecretMask || doc.MCPServers["fs"]["command"] != "npx" {
		t.Errorf("shown: %s", shown)
	}
	// Sent back with one change and one new secret.
	back := strings.Replace(string(shown), `"npx"`, `"npx2"`, 1)
	back = strings.Replace(back, `"REF":"********"`, `"REF":"new-value"`, 1)
	next, err := ParseRaw([]byte(back))
	if err != nil {
		t.Fatal(err)
	}
	if err := next.KeepSecrets(stored); err != nil {
		t.Fatal(err)
	}
	fs, web := next.Servers[0], next.Servers[1]
	if fs.Command != "npx2" || fs.Env["TOKEN"] != "s3cr3t-1" || fs.Env["REF"] != "new-value" || web.Headers["Authorization"] != "Bearer s3cr3t-2" {
		t.Errorf("kept: %+v %+v", fs, web)
	}
	// A mask for a key (or a server) with no stored value.
	for _, tc := range []struct{ doc, field string }{
		{`{"mcpServers": {"fs": {"command": "npx", "env": {"OTHER": "********"}}}}`, "mcpServers.fs.env.OTHER"},
		{`{"mcpServers": {"new": {"url": "http://x", "headers": {"A": "********"}}}}`, "mcpServers.new.headers.A"},
	} {
		c, err := ParseRaw([]byte(tc.doc))
		if err != nil {
			t.Fatal(err)
		}
		var ce *ConfigError
		if err := c.KeepSecrets(stored); !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%s: %v, want an error naming %s", tc.doc, err, tc.field)
		}
	}
}

// TestParseRawNamesTheField: each refused entry names its server and the
// field at fault, and a URL made of a reference waits to be resolved.
func TestParseRawNamesTheField(t *testing.T) {
	for _, tc := range []struct{ doc, server, field string }{
		{`{"mcpServers": {"x": {}}}`, "x", "mcpServers.x.command"},
		{`{"mcpServers": {"x": {"url": "http://a", "type": "websocket"}}}`, "x", "mcpServers.x.type"},
		{`{"mcpServers": {"x": {"command": "a", "url": "http://b"}}}`, "x", "mcpServers.x.url"},
		{`{"mcpServers": {"x": {"command": "a", "argz": []}}}`, "x", "mcpServers.x.argz"},
		{`{"mcpServers": {"x": {"command": 7}}}`, "x", "mcpServers.x.command"},
		{`{"mcpServers": {"x": {"url": "ftp://b"}}}`, "x", "mcpServers.x.url"},
		{`{"mcpServers": {"x": {"command": "a", "nodes": []}}}`, "x", "mcpServers.x.nodes"},
		{`{"mcpServers": {"a b": {"command": "a"}}}`, "a b", "mcpServers.a b"},
		{`{"mcpServers": 3}`, "", ""},
		{`{"servers": {}}`, "", "mcpServers"},
	} {
		_, err := ParseRaw([]byte(tc.doc))
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Server != tc.server || ce.Field != tc.field {
			t.Errorf("%s: %#v, want server %q field %q", tc.doc, err, tc.server, tc.field)
		}
	}
	cfg, err := ParseRaw([]byte(`{"mcpServers": {"x": {"url": "${URL}", "headers": {"A": "${TOKEN}"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.Servers[0].Interpolate(func(string) string { return "ftp://x" }); err == nil || !strings.Contains(err.Error(), "http://") {
		t.Errorf("a reference resolving to a bad URL: %v", err)
	}
	sc, err := cfg.Servers[0].Interpolate(func(k string) string { return map[string]string{"URL": "http://h/mcp", "TOKEN": "t"}[k] })
	if err != nil || sc.URL != "http://h/mcp" || sc.Headers["A"] != "t" || sc.Written().URL != "${URL}" || cfg.Servers[0].Headers["A"] != "${TOKEN}" {
		t.Errorf("resolved %+v (%v); written %+v", sc, err, sc.Written())
	}
}
