package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fusion/engine/demo"
	"fusion/engine/runner"
	"fusion/hub"
	"fusion/node"
	"fusion/router/admin"
)

func TestServeSettingsPrecedence(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "fusion.json")
	if err := os.WriteFile(cfgFile, []byte(`{"listen":"127.0.0.1:7001","max_tokens":100,"api_key":"from-file",
		"preload":["a","b"],"completions_as_chat":{"x":true,"y":false},"drain_timeout":"5s","data_dir":"/data",
		"backend":"cpu","model_backends":{"a":"mlx","b":"cpu"},"mlx_memory_limit":4096,"mlx_cache_limit":1024}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(t *testing.T, s *serveSettings)
	}{
		{"defaults", nil, nil, func(t *testing.T, s *serveSettings) {
			home, _ := os.UserHomeDir()
			c := s.cfg
			if c.Listen != "127.0.0.1:8000" || c.DataDir != filepath.Join(home, ".fusion") || c.ModelsDir != filepath.Join(home, ".fusion", "models") ||
				c.MaxBodyBytes != 10<<20 || c.MaxTokens != 0 || c.DrainTimeout != 30*time.Second || c.APIKey != "" || c.Preload != nil {
				t.Errorf("config = %+v", c)
			}
		}},
		{"file", []string{"--config", cfgFile}, nil, func(t *testing.T, s *serveSettings) {
			c := s.cfg
			if c.Listen != "127.0.0.1:7001" || c.MaxTokens != 100 || c.APIKey != "from-file" || strings.Join(c.Preload, "+") != "a+b" ||
				!c.CompletionsAsChat["x"] || c.CompletionsAsChat["y"] || c.DrainTimeout != 5*time.Second || c.ModelsDir != "/data/models" ||
				c.Backend != "cpu" || len(c.ModelBackends) != 2 || c.ModelBackends["a"] != "mlx" || c.ModelBackends["b"] != "cpu" ||
				c.MLXMemoryLimit != 4096 || c.MLXCacheLimit != 1024 {
				t.Errorf("config = %+v", c)
			}
		}},
		{"backend", []string{"--backend", "mlx", "--model-backends", "x=cpu, y=auto", "--mlx-memory-limit", "8000"},
			map[string]string{"FUSION_BACKEND": "cpu", "FUSION_MLX_CACHE_LIMIT": "100"}, func(t *testing.T, s *serveSettings) {
				c := s.cfg
				if c.Backend != "mlx" || c.ModelBackends["x"] != "cpu" || c.ModelBackends["y"] != "auto" || len(c.ModelBackends) != 2 ||
					c.MLXMemoryLimit != 8000 || c.MLXCacheLimit != 100 {
					t.Errorf("config = %+v", c)
				}
			}},
		{"env over file", nil, map[string]string{"FUSION_CONFIG": cfgFile, "FUSION_MAX_TOKENS": "200", "FUSION_MODELS_DIR": "/m"},
			func(t *testing.T, s *serveSettings) {
				if s.cfg.MaxTokens != 200 || s.cfg.Listen != "127.0.0.1:7001" || s.cfg.ModelsDir != "/m" {
					t.Errorf("config = %+v", s.cfg)
				}
			}},
		{"flag over env", []string{"--config", cfgFile, "--max-tokens", "300", "--api-key", "k", "--log-level", "debug"},
			map[string]string{"FUSION_MAX_TOKENS": "200", "FUSION_API_KEY": "e"},
			func(t *testing.T, s *serveSettings) {
				if s.cfg.MaxTokens != 300 || s.cfg.APIKey != "k" || s.logLevel.String() != "DEBUG" {
					t.Errorf("config = %+v", s.cfg)
				}
			}},
		{"scheduler and pool", []string{"--max-running", "4", "--max-kv-bytes", "1000", "--step-tokens", "128", "--max-wait", "5s",
			"--memory-budget", "2000", "--idle-ttl", "10m"}, map[string]string{"FUSION_MAX_RUNNING": "9"},
			func(t *testing.T, s *serveSettings) {
				c := s.cfg
				if c.MaxRunning != 4 || c.MaxKVBytes != 1000 || c.StepTokens != 128 || c.MaxWait != 5*time.Second ||
					c.MemoryBudget != 2000 || c.IdleTTL != 10*time.Minute {
					t.Errorf("config = %+v", c)
				}
			}},
		{"cluster", []string{"--voters", "5", "--node-id", "mac1", "--cluster-advertise", "10.0.0.1"}, nil, func(t *testing.T, s *serveSettings) {
			if c := s.cfg.Cluster; c.Voters != 5 || c.NodeID != "mac1" || c.Advertise != "10.0.0.1" {
				t.Errorf("cluster config = %+v", c)
			}
		}},
		{"cluster defaults", nil, nil, func(t *testing.T, s *serveSettings) {
			// The node id stays empty here: the node takes the hostname.
			if c := s.cfg.Cluster; c.Voters != 3 || c.NodeID != "" || c.Advertise != "" {
				t.Errorf("cluster config = %+v", c)
			}
		}},
		{"text cache", []string{"--text-cache-models", "3"}, map[string]string{"FUSION_TEXT_CACHE_MODELS": "5"}, func(t *testing.T, s *serveSettings) {
			if s.cfg.TextCacheModels != 3 {
				t.Errorf("text cache models = %d, want the flag's 3", s.cfg.TextCacheModels)
			}
		}},
		{"scheduler and pool defaults", nil, nil, func(t *testing.T, s *serveSettings) {
			c := s.cfg
			if c.MaxRunning != 16 || c.MaxKVBytes != 0 || c.StepTokens != 512 || c.MaxWait != 30*time.Second || c.MemoryBudget != 0 || c.IdleTTL != 0 ||
				c.TextCacheModels != runner.DefaultTextCacheModels || c.Backend != runner.BackendAuto || len(c.ModelBackends) != 0 ||
				c.MLXMemoryLimit != 0 || c.MLXCacheLimit != 0 {
				t.Errorf("config = %+v", c)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := resolveServe(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, s)
		})
	}

	bad := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--max-tokens", "zero"}, nil, "flag --max-tokens"},
		{nil, map[string]string{"FUSION_DRAIN_TIMEOUT": "soon"}, "environment variable FUSION_DRAIN_TIMEOUT"},
		{[]string{"--config", filepath.Join(dir, "missing.json")}, nil, "missing.json"},
		{[]string{"extra"}, nil, "unexpected arguments"},
		{[]string{"--idle-ttl", "-1s"}, nil, "flag --idle-ttl"},
		{[]string{"--max-wait", "0s"}, nil, "flag --max-wait"},
		{[]string{"--max-running", "0"}, nil, "flag --max-running"},
		{[]string{"--text-cache-models", "0"}, nil, "flag --text-cache-models"},
		{[]string{"--voters", "4"}, nil, "flag --voters"},
		{[]string{"--voters", "1"}, nil, "3 or 5 voters"},
		{nil, map[string]string{"FUSION_VOTERS": "7"}, "environment variable FUSION_VOTERS"},
		{[]string{"--backend", "metal"}, nil, "flag --backend"},
		{[]string{"--model-backends", "a=gpu"}, nil, "flag --model-backends"},
		{[]string{"--model-backends", "a"}, nil, "not model=backend"},
		{[]string{"--mlx-memory-limit", "-1"}, nil, "flag --mlx-memory-limit"},
		{[]string{"--mlx-memory-limit", "100", "--mlx-cache-limit", "200"}, nil, "over --mlx-memory-limit"},
	}
	for _, tt := range bad {
		_, err := resolveServe(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v %v: err = %v, want it to mention %q", tt.args, tt.env, err, tt.want)
		}
	}
	unknown := filepath.Join(dir, "unknown.json")
	os.WriteFile(unknown, []byte(`{"max_token":5}`), 0o644)
	if _, err := resolveServe([]string{"--config", unknown}, func(string) string { return "" }, io.Discard); err == nil ||
		!strings.Contains(err.Error(), `unknown key "max_token"`) {
		t.Errorf("unknown key: %v", err)
	}
}

// TestServeRunsAndStops starts `fusion serve` as main does, asks it for a
// completion, then cancels its context as SIGTERM does: it drains and
// returns nil (exit status 0).
func TestServeRunsAndStops(t *testing.T) {
	dir := t.TempDir()
	if _, err := demo.Create(filepath.Join(dir, "models", "demo"), demo.DefaultOptions()); err != nil {
		t.Fatal(err)
	}
	url, stop := startServe(t, "--listen", "127.0.0.1:0", "--data-dir", dir, "--threads", "1", "--log-format", "json")
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"model":"demo","prompt":"Hi","max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"text_completion"`) {
		t.Fatalf("completion: %d %s", resp.StatusCode, body)
	}
	if out := stop(); !strings.Contains(out, `"msg":"node stopped"`) || !strings.Contains(out, `"msg":"http request"`) {
		t.Errorf("logs: %s", out)
	}
	// The same lines went to the log file.
	if raw, err := os.ReadFile(filepath.Join(dir, "logs", "server.log")); err != nil || !strings.Contains(string(raw), `"msg":"node stopped"`) ||
		!strings.Contains(string(raw), `"path":"/v1/completions"`) {
		t.Errorf("log file: %v %s", err, raw)
	}
}

// TestServeEffectiveSettings: each resolved setting carries its source
// (default, file, env, flag), secrets show as set/unset, and a change is
// checked by the flag's own parser.
func TestServeEffectiveSettings(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "fusion.json")
	if err := os.WriteFile(cfgFile, []byte(`{"max_queued":9,"cluster_secret":"file-secret"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"FUSION_CONFIG": cfgFile, "FUSION_MAX_RUNNING": "3"}
	s, err := resolveServe([]string{"--api-key", "flag-key", "--max-tokens", "50"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range s.cfg.Effective {
		got[e.Key] = e.Value + "/" + e.Source
	}
	for k, want := range map[string]string{"max_queued": "9/file", "max_running": "3/env", "max_tokens": "50/flag", "step_tokens": "512/default",
		"api_key": "set/flag", "cluster_secret": "set/file", "log_max_files": "5/default"} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}
	for k, v := range got {
		if strings.Contains(v, "flag-key") || strings.Contains(v, "file-secret") {
			t.Errorf("%s shows a secret: %s", k, v)
		}
	}
	if err := s.cfg.CheckSetting("max_queued", "0"); err == nil {
		t.Error("max_queued 0 accepted (the flag wants ≥ 1)")
	}
	if err := s.cfg.CheckSetting("log_level", "debug"); err != nil {
		t.Errorf("log_level debug: %v", err)
	}
	if err := s.cfg.CheckSetting("nope", "1"); err == nil {
		t.Error("an unknown setting accepted")
	}
}

func TestServeSessionSettings(t *testing.T) {
	s, err := resolveServe(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o := s.cfg.OpenClaw; o.TTL != time.Hour || o.Cap != 1000 || o.Heartbeat != 30*time.Second || o.MaxHistoryBytes != 8<<20 {
		t.Fatalf("defaults: %+v", o)
	}
	s, err = resolveServe([]string{"--session-ttl", "90s", "--session-cap", "5", "--session-heartbeat", "2s"},
		func(k string) string { return map[string]string{"FUSION_SESSION_MAX_HISTORY_BYTES": "4096"}[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o := s.cfg.OpenClaw; o.TTL != 90*time.Second || o.Cap != 5 || o.Heartbeat != 2*time.Second || o.MaxHistoryBytes != 4096 {
		t.Fatalf("set: %+v", o)
	}
	for _, args := range [][]string{{"--session-ttl", "0s"}, {"--session-cap", "0"}, {"--session-heartbeat", "soon"}} {
		if _, err := resolveServe(args, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%v: err = %v", args, err)
		}
	}
}

func TestServeMCPSettings(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(path, []byte(`{"mcpServers": {
		"fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "${HOME_DIR}"]},
		"web": {"url": "https://mcp.example/mcp", "headers": {"Authorization": "Bearer ${WEB_TOKEN}"}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"HOME_DIR": "/srv/notes", "WEB_TOKEN": "tok"}
	getenv := func(k string) string { return env[k] }
	s, err := resolveServe([]string{"--mcp-config", path, "--mcp-call-timeout", "5s"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got := s.cfg.MCPServers.Servers
	if len(got) != 2 || got[0].Name != "fs" || got[0].Args[2] != "/srv/notes" || got[1].Headers["Authorization"] != "Bearer tok" {
		t.Fatalf("servers: %+v", got)
	}
	if s.cfg.MCP.CallTimeout != 5*time.Second {
		t.Errorf("call timeout %v", s.cfg.MCP.CallTimeout)
	}
	// The config file key works too; a missing variable is an error naming
	// it (and not any value).
	cfgFile := filepath.Join(dir, "fusion.json")
	if err := os.WriteFile(cfgFile, []byte(`{"mcp_config": "`+path+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	delete(env, "WEB_TOKEN")
	_, err = resolveServe([]string{"--config", cfgFile}, getenv, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "WEB_TOKEN") || !strings.Contains(err.Error(), "mcp") {
		t.Errorf("missing variable: %v", err)
	}
	if _, err := resolveServe([]string{"--mcp-call-timeout", "0s"}, getenv, io.Discard); err == nil {
		t.Error("a zero call timeout was accepted")
	}
}

// TestServeModelScopeSettings: ModelScope's endpoint and token from
// $MODELSCOPE_ENDPOINT / $MODELSCOPE_API_TOKEN or their flags, a bad URL
// refused, the token never shown among the effective settings.
func TestServeModelScopeSettings(t *testing.T) {
	s, err := resolveServe(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.HF.ModelScopeEndpoint != hub.DefaultModelScopeEndpoint || s.cfg.HF.ModelScopeToken != "" {
		t.Errorf("defaults: %+v", s.cfg.HF)
	}
	env := map[string]string{"MODELSCOPE_ENDPOINT": "http://ms.example:8080", "MODELSCOPE_API_TOKEN": "ms-secret"}
	s, err = resolveServe(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.HF.ModelScopeEndpoint != "http://ms.example:8080" || s.cfg.HF.ModelScopeToken != "ms-secret" {
		t.Errorf("from the environment: %+v", s.cfg.HF)
	}
	for _, e := range s.cfg.Effective {
		if strings.Contains(e.Value, "ms-secret") {
			t.Errorf("%s shows the token", e.Key)
		}
	}
	s, err = resolveServe([]string{"--modelscope-endpoint", "https://modelscope.ai", "--modelscope-token", "flag-tok"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.HF.ModelScopeEndpoint != "https://modelscope.ai" || s.cfg.HF.ModelScopeToken != "flag-tok" {
		t.Errorf("flags over the environment: %+v", s.cfg.HF)
	}
	if _, err := resolveServe([]string{"--modelscope-endpoint", "modelscope.cn"}, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), "modelscope-endpoint") {
		t.Errorf("a URL without a scheme: %v", err)
	}
}

// TestServeHFCacheSetting: --hf-cache defaults to the cache
// huggingface_hub uses ($HF_HUB_CACHE, else $HF_HOME/hub, ...), a flag
// or FUSION_HF_CACHE sets it, and "" turns it off.
func TestServeHFCacheSetting(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, map[string]string{"HF_HUB_CACHE": "/hc", "HF_HOME": "/hh"}, "/hc"},
		{nil, map[string]string{"HF_HOME": "/hh"}, "/hh/hub"},
		{nil, map[string]string{"HF_HOME": "/hh", "FUSION_HF_CACHE": "/f"}, "/f"},
		{[]string{"--hf-cache", "/flag"}, map[string]string{"HF_HOME": "/hh", "FUSION_HF_CACHE": "/f"}, "/flag"},
		{[]string{"--hf-cache", ""}, map[string]string{"HF_HUB_CACHE": "/hc"}, ""},
	} {
		s, err := resolveServe(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if s.cfg.HFCache != tc.want {
			t.Errorf("%v %v: HFCache %q, want %q", tc.args, tc.env, s.cfg.HFCache, tc.want)
		}
	}
}

// TestServeDownloadPartsSettings: --download-parts, --download-min-part
// and --download-resumes default to the hub and node packages' defaults,
// are set by flag, and refuse values below 1 (below 0 for resumes).
func TestServeDownloadPartsSettings(t *testing.T) {
	none := func(string) string { return "" }
	s, err := resolveServe(nil, none, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.HF.Parts != hub.DefaultParts || s.cfg.HF.MinPart != hub.DefaultMinPart || s.cfg.HF.Resumes != node.DefaultDownloadResumes {
		t.Errorf("defaults: parts %d, min part %d, resumes %d", s.cfg.HF.Parts, s.cfg.HF.MinPart, s.cfg.HF.Resumes)
	}
	if s.cfg.HF.Parallel != 4 || s.cfg.HF.Token != "" {
		t.Errorf("defaults: parallel %d, token %q", s.cfg.HF.Parallel, s.cfg.HF.Token)
	}
	s, err = resolveServe([]string{"--download-parts", "8", "--download-min-part", "1048576", "--download-resumes", "0", "--download-parallel", "2"}, none, io.Discard)
	if err != nil || s.cfg.HF.Parts != 8 || s.cfg.HF.MinPart != 1<<20 || s.cfg.HF.Resumes != 0 || s.cfg.HF.Parallel != 2 {
		t.Errorf("flags: %v, parts %d, min part %d, resumes %d, parallel %d", err, s.cfg.HF.Parts, s.cfg.HF.MinPart, s.cfg.HF.Resumes, s.cfg.HF.Parallel)
	}
	// The tokens: the environment's, unless a flag gives one.
	env := map[string]string{"HF_TOKEN": "hf_env", "MODELSCOPE_API_TOKEN": "ms_env"}
	s, err = resolveServe(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil || s.cfg.HF.Token != "hf_env" || s.cfg.HF.ModelScopeToken != "ms_env" {
		t.Errorf("tokens from the environment: %v, %q, %q", err, s.cfg.HF.Token, s.cfg.HF.ModelScopeToken)
	}
	s, err = resolveServe([]string{"--hf-token", "hf_flag"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil || s.cfg.HF.Token != "hf_flag" {
		t.Errorf("--hf-token over HF_TOKEN: %v, %q", err, s.cfg.HF.Token)
	}
	for _, args := range [][]string{{"--download-parts", "0"}, {"--download-min-part", "0"}, {"--download-resumes", "-1"}, {"--download-parallel", "0"}} {
		if _, err := resolveServe(args, none, io.Discard); err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// TestServeBenchLimits: --bench-max-prompt, --bench-max-generate,
// --bench-max-streams, --bench-max-points, --bench-max-questions and --bench-max-question-bytes
// default to router/admin's limits, are set by flag and refuse values
// below 1.
func TestServeBenchLimits(t *testing.T) {
	none := func(string) string { return "" }
	s, err := resolveServe(nil, none, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (admin.BenchLimits{MaxPrompt: admin.MaxBenchPrompt, MaxGenerate: admin.MaxBenchGenerate, MaxStreams: admin.MaxBenchStreams, MaxPoints: admin.MaxBenchGrid,
		MaxQuestions: admin.MaxAccuracyQuestions, MaxQuestionBytes: admin.MaxAccuracyQuestionBytes}); s.cfg.Bench != want {
		t.Errorf("defaults %+v, want %+v", s.cfg.Bench, want)
	}
	s, err = resolveServe([]string{"--bench-max-prompt", "64", "--bench-max-generate", "8", "--bench-max-streams", "2", "--bench-max-points", "3",
		"--bench-max-questions", "3", "--bench-max-question-bytes", "100"}, none, io.Discard)
	if want := (admin.BenchLimits{MaxPrompt: 64, MaxGenerate: 8, MaxStreams: 2, MaxPoints: 3, MaxQuestions: 3, MaxQuestionBytes: 100}); err != nil || s.cfg.Bench != want {
		t.Errorf("flags: %v, %+v", err, s.cfg.Bench)
	}
	for _, args := range [][]string{{"--bench-max-prompt", "0"}, {"--bench-max-generate", "0"}, {"--bench-max-streams", "-1"}, {"--bench-max-points", "0"},
		{"--bench-max-questions", "0"}, {"--bench-max-question-bytes", "0"}} {
		if _, err := resolveServe(args, none, io.Discard); err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%v: %v", args, err)
		}
	}
}
