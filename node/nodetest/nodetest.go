// Package nodetest starts real nodes for tests: a tiny random-weight demo
// model written into a temporary models directory, the real engine, and
// the HTTP frontend on a free loopback port.
package nodetest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"fusion/cluster"
	"fusion/dashboard"
	"fusion/engine/backend/mlx"
	"fusion/engine/demo"
	"fusion/engine/demo/demotest"
	"fusion/engine/runner"
	"fusion/internal/testenv"
	"fusion/internal/tracing"
	"fusion/mcp/host"
	"fusion/node"
	"fusion/router/admin"
	"fusion/router/openclaw"
)

// Model is the name of the demo model every test node serves.
const Model = "demo"

// Options change the node a test gets.
type Options struct {
	APIKey            string
	AuthFailures      int           // failed key attempts per address per minute (0: the node's default; -1: no limit)
	KeyUsageInterval  time.Duration // sub-key usage exchange between members (0: the node's default)
	MaxQueued         int
	MaxEmbeds         int
	MaxRerankDocs     int
	MaxRunning        int
	MaxTokens         int
	MaxBodyBytes      int64
	MaxAudioBytes     int64 // audio upload caps (0: the node's defaults)
	MaxAudioSeconds   int64
	MaxSpeechInput    int   // /v1/audio/speech input cap in characters (0: the node's default)
	MemoryBudget      int64 // weights of loaded models (0: the node's default)
	DrainTimeout      time.Duration
	CompletionsAsChat map[string]bool
	OpenClaw          openclaw.Options
	Sessions          openclaw.SessionStore // shared by several nodes to stand in for the replicated one
	// ModelsDir, when set, is used instead of a fresh one with the demo
	// model.
	ModelsDir string
	// DataDir, when set, is used instead of a fresh one (a restart: a new
	// node on the data of a stopped one).
	DataDir string
	// CacheHotBytes and CacheSSDBytes are the prefix cache's caps (0: the
	// node's defaults).
	CacheHotBytes, CacheSSDBytes int64
	// Cluster makes the node a cluster member.
	Cluster node.ClusterConfig
	// MCPServers and MCP configure the node's MCP host.
	MCPServers  host.Config
	MCP         host.Options
	MCPMaxSteps int
	// Logger, when nil, discards the logs, or writes them to stderr when
	// FUSION_TEST_LOG=1.
	Logger *slog.Logger
	// LogLevel and Logs are the node's (see node.Config).
	LogLevel *slog.LevelVar
	Logs     admin.Logs
	// Backend is the node's compute backend (auto, mlx, cpu; "": the
	// FUSION_TEST_BACKEND environment variable's, else the node's
	// default). A node asked for mlx must get it: Start skips without
	// MLX (fails under FUSION_REQUIRE_MLX=1) and fails if the node fell
	// back to the CPU backend, so a suite run "on MLX" really ran there.
	Backend string
	// MLXMemoryLimit is the node's MLX memory limit in bytes (0: MLX's).
	MLXMemoryLimit int64
	// WrapBackend wraps every backend the node makes for a model.
	WrapBackend runner.WrapBackend
	// Panel holds the admin panel's session limits.
	Panel dashboard.Options
	// HF configures the node's Hugging Face downloads; an empty Endpoint
	// is a closed local port, so no test reaches the real Hub.
	HF node.HFConfig
	// HFCache is the node's Hugging Face cache directory ("": none).
	HFCache string
	// Bench bounds benchmark requests (zero: the defaults).
	Bench admin.BenchLimits
	// ProgressEvery is how often a job's record is written (0: 50 ms);
	// MaxJobs how many jobs run at once (0: the node's default).
	ProgressEvery time.Duration
	MaxJobs       int
	// Tracing is the node's OpenTelemetry exporter (off by default).
	Tracing tracing.Config
}

// Models writes the demo model into a fresh directory and returns it. The
// model is built once per test binary (demotest); every directory holds a
// copy of its own, which the test may edit.
func Models(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	demotest.Create(t, filepath.Join(dir, Model), demo.DefaultOptions())
	return dir
}

// Thinker is a second demo model for thinking tests: it writes visible
// text inside a <think> block and never closes the block itself (its
// </think> is suppressed, and so is <tool_call>, which the output parser
// also takes as the end of an unclosed reasoning block), so only a
// reasoning budget (or max_tokens) ends its thinking.
const Thinker = "thinker"

// AddThinker writes the Thinker model into dir, a directory from Models
// (built once per test binary, as Models' model is).
func AddThinker(t testing.TB, dir string) {
	t.Helper()
	demotest.Write(t, filepath.Join(dir, Thinker), thinkerKey{}, func() (*demo.Model, error) {
		m, err := demo.Build(demo.Options{Seed: 6})
		if err == nil {
			err = m.Suppress("</think>", "<tool_call>")
		}
		return m, err
	})
}

// thinkerKey is the Thinker's key in demotest's models.
type thinkerKey struct{}

// ModelsWithContext is Models with the demo model's context window set to
// n tokens, so a generation that runs to the window is short.
func ModelsWithContext(t testing.TB, n int) string {
	t.Helper()
	dir := Models(t)
	EditModelJSON(t, dir, Model, "config.json", map[string]any{"max_position_embeddings": n})
	return dir
}

// EditModelJSON sets keys of one of model's JSON files in dir, a directory
// from Models (config.json, generation_config.json, ...): a test's way to
// give the demo model a smaller context window or other end tokens.
func EditModelJSON(t testing.TB, dir, model, file string, set map[string]any) {
	t.Helper()
	p := filepath.Join(dir, model, file)
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // large integers stay as written
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	maps.Copy(doc, set)
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Start starts a node and stops it when the test ends.
func Start(t testing.TB, o Options) *node.Node {
	t.Helper()
	if o.ModelsDir == "" {
		o.ModelsDir = Models(t)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		if os.Getenv("FUSION_TEST_LOG") == "1" {
			o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
	}
	if o.DataDir == "" {
		o.DataDir = t.TempDir()
	}
	if o.Backend == "" {
		o.Backend = testenv.Backend()
	}
	if o.HF.Endpoint == "" {
		o.HF.Endpoint = "http://127.0.0.1:1"
	}
	if o.ProgressEvery == 0 {
		o.ProgressEvery = 50 * time.Millisecond
	}
	if o.Backend == runner.BackendMLX {
		testenv.NeedMLX(t, mlx.Available())
	}
	n, err := node.New(node.Config{
		Listen: "127.0.0.1:0", DataDir: o.DataDir, ModelsDir: o.ModelsDir, APIKey: o.APIKey,
		CacheHotBytes: o.CacheHotBytes, CacheSSDBytes: o.CacheSSDBytes,
		MaxQueued: o.MaxQueued, MaxEmbeds: o.MaxEmbeds, MaxRerankDocs: o.MaxRerankDocs, MaxRunning: o.MaxRunning, MaxTokens: o.MaxTokens, MaxBodyBytes: o.MaxBodyBytes, MaxAudioBytes: o.MaxAudioBytes, MaxAudioSeconds: o.MaxAudioSeconds, MaxSpeechInput: o.MaxSpeechInput, MemoryBudget: o.MemoryBudget, DrainTimeout: o.DrainTimeout,
		CompletionsAsChat: o.CompletionsAsChat, OpenClaw: o.OpenClaw, Sessions: o.Sessions, Threads: 1, Version: "test", Logger: o.Logger, Cluster: o.Cluster,
		MCPServers: o.MCPServers, MCP: o.MCP, MCPMaxSteps: o.MCPMaxSteps, LogLevel: o.LogLevel, Logs: o.Logs,
		Backend: o.Backend, MLXMemoryLimit: o.MLXMemoryLimit, WrapBackend: o.WrapBackend,
		AuthFailures: o.AuthFailures, KeyUsageInterval: o.KeyUsageInterval, Panel: o.Panel, Tracing: o.Tracing,
		HF: o.HF, HFCache: o.HFCache, Bench: o.Bench, Jobs: node.JobsConfig{ProgressEvery: o.ProgressEvery, MaxRunning: o.MaxJobs},
	})
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	n.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.Stop(ctx); err != nil {
			t.Errorf("node stop: %v", err)
		}
	})
	if st := n.Runner().BackendStatus(); o.Backend == runner.BackendMLX && st.Name != runner.BackendMLX {
		t.Fatalf("node asked for the MLX backend serves on %s: %s", st.Name, st.Reason)
	}
	return n
}

// Member is the cluster settings of a test node on loopback ports (the
// HTTP, Raft and gRPC listeners on free ones) with cluster.TestTiming's
// timers: id bootstraps a cluster of expect members or, with expect 0,
// joins one through the gossip addresses in join.
func Member(id string, expect int, join []string) node.ClusterConfig {
	return node.ClusterConfig{NodeID: id, Listen: "127.0.0.1:0", RaftListen: "127.0.0.1:0", GRPCListen: "127.0.0.1:0",
		BootstrapExpect: expect, Join: join, Secret: "s", Timing: cluster.TestTiming()}
}

// StartCluster starts one node per Options, the first ("a") bootstrapping
// a cluster and the others ("b", "c", ...) joining it (each Options'
// Cluster is replaced), and returns them once the first counts every
// member (60 s at most; stopped when the test ends, as Start's).
func StartCluster(t testing.TB, opts ...Options) []*node.Node {
	t.Helper()
	if len(opts) == 0 {
		t.Fatal("StartCluster: no nodes")
	}
	nodes := make([]*node.Node, len(opts))
	for i, o := range opts {
		id := string(rune('a' + i))
		if i == 0 {
			o.Cluster = Member(id, 1, nil)
		} else {
			o.Cluster = Member(id, 0, []string{nodes[0].Cluster().GossipAddr()})
		}
		nodes[i] = Start(t, o)
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(nodes[0].Cluster().Members()) != len(nodes) {
		if time.Now().After(deadline) {
			t.Fatalf("the cluster has %d members, want %d", len(nodes[0].Cluster().Members()), len(nodes))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nodes
}
