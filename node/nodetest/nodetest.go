// Package nodetest starts real nodes for tests: a tiny random-weight demo
// model written into a temporary models directory, the real engine, and
// the HTTP frontend on a free loopback port.
package nodetest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"fusion/engine/demo"
	"fusion/node"
	"fusion/router/openclaw"
)

// Model is the name of the demo model every test node serves.
const Model = "demo"

// Options change the node a test gets.
type Options struct {
	APIKey            string
	MaxQueued         int
	MaxEmbeds         int
	MaxRunning        int
	MaxTokens         int
	MaxBodyBytes      int64
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
	// Logger, when nil, discards the logs, or writes them to stderr when
	// FUSION_TEST_LOG=1.
	Logger *slog.Logger
}

// Models writes the demo model into a fresh directory and returns it.
func Models(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := demo.Create(filepath.Join(dir, Model), demo.DefaultOptions()); err != nil {
		t.Fatalf("demo model: %v", err)
	}
	return dir
}

// Thinker is a second demo model for thinking tests. The default demo
// model's random weights write only newlines inside a <think> block, which
// no thinking block shows; this seed's write visible text there.
const Thinker = "thinker"

// AddThinker writes the Thinker model into dir, a directory from Models.
func AddThinker(t testing.TB, dir string) {
	t.Helper()
	if _, err := demo.Create(filepath.Join(dir, Thinker), demo.Options{Seed: 6}); err != nil {
		t.Fatalf("thinker model: %v", err)
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
	n, err := node.New(node.Config{
		Listen: "127.0.0.1:0", DataDir: o.DataDir, ModelsDir: o.ModelsDir, APIKey: o.APIKey,
		CacheHotBytes: o.CacheHotBytes, CacheSSDBytes: o.CacheSSDBytes,
		MaxQueued: o.MaxQueued, MaxEmbeds: o.MaxEmbeds, MaxRunning: o.MaxRunning, MaxTokens: o.MaxTokens, MaxBodyBytes: o.MaxBodyBytes, MemoryBudget: o.MemoryBudget, DrainTimeout: o.DrainTimeout,
		CompletionsAsChat: o.CompletionsAsChat, OpenClaw: o.OpenClaw, Sessions: o.Sessions, Threads: 1, Version: "test", Logger: o.Logger, Cluster: o.Cluster,
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
	return n
}
