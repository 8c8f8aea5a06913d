package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"time"

	"fusion/engine"
	"fusion/engine/prefixcache"
	"fusion/engine/runner"
	"fusion/engine/sample"
)

// cacheRun is one time-to-first-token measurement.
type cacheRun struct {
	TTFTSeconds  float64 `json:"ttft_s"`
	CachedTokens int     `json:"cached_tokens"`
	FirstToken   int     `json:"first_token"`
}

// CacheOptions are the settings of the prefix-cache benchmark.
type CacheOptions struct {
	CacheDir string // directory the benchmark models are created in (reused)
	Format   string // model format: bf16, mlx-q4 or gguf-q4_k_m
	Prompt   int    // prompt tokens
	Threads  int    // compute goroutines (0: all cores)
	Repeat   int    // runs of each cached case (the best is reported)
	Model    string // a model directory to use instead of the benchmark model of Format
	// Data is where the temporary data dir (and its SSD tier) goes
	// ("": CacheDir, on disk unlike a tmpfs /tmp).
	Data string
}

// DefaultCacheOptions are the settings `make bench` uses.
func DefaultCacheOptions() CacheOptions {
	return CacheOptions{CacheDir: DefaultCacheDir, Format: "mlx-q4", Prompt: 2048, Repeat: 3}
}

// Cache measures the prefix cache on the Qwen3-0.6B-shaped benchmark
// model (see bench engine): the time to the first token of a prompt of
// -prompt tokens through the real runner, cold, with its blocks in RAM,
// and restored from the SSD after a restart (a new runner on the same data
// dir), once with the block files evicted from the page cache first
// (read from the device) and once with them in it. The ratios divide the
// cold time by each.
func Cache(ctx context.Context, o CacheOptions, stdout, stderr io.Writer) error {
	if o.Prompt < 2 || o.Repeat < 1 {
		return optionErrorf("-prompt must be at least 2 and -repeat positive")
	}
	path, desc := o.Model, o.Model
	if path == "" {
		var f *engineFormat
		for _, ef := range engineFormats(demo0p6Shape()) {
			if ef.name == o.Format {
				f = &ef
			}
		}
		if f == nil {
			return optionErrorf("unknown format %q", o.Format)
		}
		var err error
		if path, err = benchModel(o.CacheDir, *f); err != nil {
			return err
		}
		desc = "random weights shaped like Qwen3-0.6B, " + f.name
	}
	modelsDir, name := filepath.Dir(path), filepath.Base(path)
	if o.Data == "" {
		o.Data = o.CacheDir
		if o.Model != "" {
			o.Data = filepath.Dir(o.Model)
		}
	}
	if err := os.MkdirAll(o.Data, 0o755); err != nil {
		return err
	}
	data, err := os.MkdirTemp(o.Data, "fusion-bench-cache-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(data)

	vocab := 150000 // below the Qwen3 vocabulary of the benchmark models
	var conf struct {
		VocabSize int `json:"vocab_size"`
	}
	if b, err := os.ReadFile(filepath.Join(path, "config.json")); err == nil && json.Unmarshal(b, &conf) == nil && conf.VocabSize > 0 {
		vocab = min(vocab, conf.VocabSize)
	}
	prompt := make([]int, o.Prompt)
	for i := range prompt {
		prompt[i] = (i*7919 + 13) % 150000 % vocab
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	open := func() (*runner.Runner, error) {
		runtime.GC()
		debug.FreeOSMemory()
		return runner.New(runner.Config{ModelsDir: modelsDir, Preload: []string{name}, Threads: o.Threads, Logger: log,
			MaxTokens: 1, CacheDir: filepath.Join(data, "cache")})
	}
	measure := func(r *runner.Runner) (cacheRun, error) {
		params := sample.DefaultParams()
		params.Temperature = 0
		start := time.Now()
		events, err := r.Generate(ctx, &engine.Request{Model: name, PromptTokens: prompt, MaxTokens: 1, Sampling: params})
		if err != nil {
			return cacheRun{}, err
		}
		var run cacheRun
		first := true
		for ev := range events {
			if first {
				run.TTFTSeconds = time.Since(start).Seconds()
				first = false
			}
			if ev.Err != nil {
				return run, ev.Err
			}
			if len(ev.Tokens) > 0 {
				run.FirstToken = ev.Tokens[0].ID
			}
			if ev.Done {
				run.CachedTokens = ev.Usage.CachedTokens
			}
		}
		return run, nil
	}
	best := func(r *runner.Runner, before func()) (cacheRun, error) {
		var b cacheRun
		for i := range o.Repeat {
			if before != nil {
				before()
			}
			run, err := measure(r)
			if err != nil {
				return run, err
			}
			if i == 0 || run.TTFTSeconds < b.TTFTSeconds {
				b = run
			}
		}
		return b, nil
	}

	out := map[string]any{
		"model":  desc,
		"prompt": o.Prompt, "block_size": prefixcache.DefaultBlockSize, "ssd_dir": filepath.Join(data, "cache"),
		"note":  "TTFT through the runner (prefix-cache lookup, prefill of the rest, first token); cold includes storing the blocks; ram: the same runner again; after a restart (new runner, same data dir) with the RAM tier cleared before each run: ssd_device with the block files evicted from the page cache (posix_fadvise), ssd_page_cache with them in it; best of -repeat runs for the cached cases",
		"goals": map[string]float64{"ram_speedup": 20, "ssd_speedup": 5},
	}
	fmt.Fprintf(stderr, "bench cache: %s, %d-token prompt\n", desc, o.Prompt)
	r, err := open()
	if err != nil {
		return err
	}
	cold, err := measure(r)
	if err != nil {
		return errors.Join(err, r.Close())
	}
	ram, err := best(r, nil)
	if err != nil {
		return errors.Join(err, r.Close())
	}
	stats := r.CacheStats()
	out["kv_block_bytes"] = stats.HotBytes / int64(max(stats.HotBlocks, 1))
	if err := r.Close(); err != nil {
		return err
	}
	if r, err = open(); err != nil {
		return err
	}
	dropped := true
	device, err := best(r, func() {
		r.ClearHotCache(ctx)
		dropped = dropped && dropPageCache(filepath.Join(data, "cache"))
	})
	if err != nil {
		return errors.Join(err, r.Close())
	}
	warm, err := best(r, func() { r.ClearHotCache(ctx) })
	out["cache_stats_after_restart"] = r.CacheStats()
	if err := errors.Join(err, r.Close()); err != nil {
		return err
	}
	if cold.FirstToken != ram.FirstToken || cold.FirstToken != device.FirstToken || cold.FirstToken != warm.FirstToken {
		return fmt.Errorf("the first token differs: cold %d, RAM %d, SSD %d/%d", cold.FirstToken, ram.FirstToken, device.FirstToken, warm.FirstToken)
	}
	out["cold"], out["ram"], out["ssd_page_cache"] = cold, ram, warm
	out["ssd_page_cache_dropped"] = dropped
	if dropped {
		out["ssd_device"] = device
	}
	ratios := map[string]float64{
		"ram_speedup": cold.TTFTSeconds / ram.TTFTSeconds,
		"ssd_speedup": cold.TTFTSeconds / warm.TTFTSeconds,
	}
	if dropped {
		ratios["ssd_speedup"] = cold.TTFTSeconds / device.TTFTSeconds
		ratios["ssd_page_cache_speedup"] = cold.TTFTSeconds / warm.TTFTSeconds
	}
	out["ratios"] = ratios
	return json.NewEncoder(stdout).Encode(out)
}
