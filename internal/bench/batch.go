package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"fusion/engine"
	"fusion/engine/backend/cpu"
	"fusion/engine/model"
	"fusion/engine/prompt"
	"fusion/engine/runner"
	"fusion/engine/sample"
)

// batchResult is one concurrency level of the batching benchmark.
type batchResult struct {
	Streams int `json:"streams"`
	// DecodeTokS is the aggregate decode rate while every stream was
	// decoding: tokens produced between the last stream's first token
	// and the first stream's end, over that window.
	DecodeTokS    float64 `json:"aggregate_decode_tok_s"`
	PerStreamTokS float64 `json:"per_stream_decode_tok_s"`
	MeanTTFTms    float64 `json:"mean_ttft_ms"`
	WallSeconds   float64 `json:"wall_s"`
	Tokens        int     `json:"tokens"`
	MaxBatch      int64   `json:"max_batch"`
	// ForwardTokS is the same number of decode rows through model.Forward
	// directly, without the runner: the kernels' ceiling for this level.
	ForwardTokS float64 `json:"forward_only_decode_tok_s"`
	// Efficiency is DecodeTokS / ForwardTokS: what the scheduler keeps.
	Efficiency float64 `json:"scheduler_efficiency"`
	Error      string  `json:"error,omitempty"`
	// Runs is DecodeTokS of every repetition of this level; the row's
	// other figures are those of the median one.
	Runs []float64 `json:"aggregate_decode_tok_s_runs,omitempty"`
}

// BatchOptions are the settings of the batching benchmark.
type BatchOptions struct {
	CacheDir string   // directory the benchmark models are created in (reused)
	Formats  []string // formats to run
	Streams  []int    // concurrency levels
	Prompt   int      // prompt tokens per stream
	Decode   int      // greedy tokens per stream
	Threads  int      // compute goroutines (0: all cores)
	// Repeat is the runs of every level, interleaved; each level reports
	// its median run (a shared VM's memory bandwidth drifts by a fifth
	// between runs).
	Repeat int
	// CPUProfile is a file for a CPU profile of the forward-only steps at
	// the highest concurrency (one format in Formats).
	CPUProfile string
}

// DefaultBatchOptions are the settings `make bench` uses.
func DefaultBatchOptions() BatchOptions {
	return BatchOptions{CacheDir: DefaultCacheDir, Formats: []string{"bf16", "mlx-q4"}, Streams: []int{1, 2, 4, 8},
		Prompt: 32, Decode: 64, Repeat: 3}
}

// Batch measures continuous batching through the runner (the real
// scheduler): aggregate greedy decode tokens/s with 1, 2, 4, 8 concurrent
// streams on the Qwen3-0.6B-shaped model, and the ratio of the highest
// concurrency to one stream.
func Batch(ctx context.Context, o BatchOptions, stdout, stderr io.Writer) error {
	profile, closeProfile, err := createProfile(o.CPUProfile, o.Formats)
	if err != nil {
		return err
	}
	defer closeProfile()
	levels := o.Streams
	if len(levels) == 0 || slices.Min(levels) < 1 {
		return optionErrorf("-streams: want positive integers, got %v", levels)
	}
	if o.Prompt < 1 || o.Decode < 2 || o.Repeat < 1 {
		return optionErrorf("-prompt and -repeat must be positive and -decode at least 2")
	}
	out := map[string]any{
		"model":   "random weights shaped like Qwen3-0.6B, served by the runner's continuous-batching scheduler",
		"prompt":  o.Prompt,
		"decode":  o.Decode,
		"streams": levels,
		"repeat":  o.Repeat,
		"note":    "aggregate_decode_tok_s counts tokens while every stream decodes (the median of the runs); ratio = highest concurrency / 1 stream (goal >= 3 at 8)",
	}
	results := map[string]any{}
	for _, f := range engineFormats(demo0p6Shape()) {
		if !slices.Contains(o.Formats, f.name) {
			continue
		}
		fmt.Fprintf(stderr, "bench batch: %s\n", f.name)
		path, err := benchModel(o.CacheDir, f)
		if err != nil {
			results[f.name] = map[string]string{"error": err.Error()}
			continue
		}
		rows, err := runBatch(ctx, path, levels, o.Repeat, o.Prompt, o.Decode, o.Threads, stderr)
		if err == nil {
			err = forwardOnly(ctx, path, rows, o.Prompt, o.Threads, profile)
		}
		if err != nil {
			results[f.name] = map[string]string{"error": err.Error()}
			continue
		}
		res := map[string]any{"levels": rows}
		if first, last := rows[0], rows[len(rows)-1]; first.DecodeTokS > 0 && len(rows) > 1 {
			res[fmt.Sprintf("ratio_%d_vs_%d", last.Streams, first.Streams)] = last.DecodeTokS / first.DecodeTokS
			if first.ForwardTokS > 0 {
				res[fmt.Sprintf("forward_only_ratio_%d_vs_%d", last.Streams, first.Streams)] = last.ForwardTokS / first.ForwardTokS
			}
		}
		results[f.name] = res
	}
	out["formats"] = results
	return json.NewEncoder(stdout).Encode(out)
}

// runBatch serves the model at path with a runner and runs every
// concurrency level repeat times (each repetition on a fresh runner after
// a warm-up request), the levels interleaved so that a drift of the
// machine's speed reaches all of them, and keeps each level's median run.
func runBatch(ctx context.Context, path string, levels []int, repeat, promptLen, decodeLen, threads int, stderr io.Writer) ([]batchResult, error) {
	dir, name := filepath.Dir(path), strings.TrimSuffix(filepath.Base(path), ".gguf")
	maxStreams := 1
	for _, n := range levels {
		maxStreams = max(maxStreams, n)
	}
	text, err := prompt.Load(path)
	if err != nil {
		return nil, err
	}
	request := fullLengthRequests(text, name, promptLen, decodeLen)
	runs := make([][]batchResult, len(levels))
	// A runner per repetition: its scheduler's max_batch counts from the
	// start of the repetition.
	for rep := range repeat {
		r, err := runner.New(runner.Config{
			ModelsDir: dir, Preload: []string{name}, Threads: threads, MaxRunning: maxStreams, MaxQueued: maxStreams,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			return nil, err
		}
		if _, err := streamTimes(ctx, r, request(99)); err != nil { // warm-up
			r.Close()
			return nil, err
		}
		for i, n := range levels {
			fmt.Fprintf(stderr, "bench batch:   %d streams (run %d of %d)\n", n, rep+1, repeat)
			runs[i] = append(runs[i], runLevel(ctx, r, n, request))
		}
		r.Close()
	}
	rows := make([]batchResult, len(levels))
	for i, rs := range runs {
		rows[i] = medianRun(rs)
	}
	return rows, nil
}

// fullLengthRequests makes stream i's greedy request: a prompt of its
// own and decodeLen tokens. Random weights stop early on an end-of-text
// token, so those are forbidden and every stream decodes its full length.
func fullLengthRequests(text *prompt.Builder, name string, promptLen, decodeLen int) func(i int) *engine.Request {
	bias := map[int]float64{}
	for _, id := range text.Tokenizer().EOS() {
		bias[id] = -100
	}
	return func(i int) *engine.Request {
		p := sample.DefaultParams()
		p.Temperature, p.LogitBias = 0, bias
		toks := make([]int, promptLen)
		for j := range toks {
			toks[j] = (i*104729 + j*7919 + 13) % 150000
		}
		return &engine.Request{Model: name, PromptTokens: toks, Sampling: p, MaxTokens: decodeLen}
	}
}

// runLevel runs n streams at once and measures them.
func runLevel(ctx context.Context, r *runner.Runner, n int, request func(int) *engine.Request) batchResult {
	start := time.Now()
	times := make([][]time.Time, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { times[i], errs[i] = streamTimes(ctx, r, request(i)) })
	}
	wg.Wait()
	row := batchResult{Streams: n, WallSeconds: time.Since(start).Seconds(), MaxBatch: r.Stats().MaxBatch}
	for _, err := range errs {
		if err != nil {
			row.Error = err.Error()
		}
	}
	if row.Error == "" {
		row.fill(start, times)
	}
	return row
}

// medianRun returns the run of median DecodeTokS (a failed run, if any),
// with every run's DecodeTokS in Runs.
func medianRun(rs []batchResult) batchResult {
	var tps []float64
	for _, r := range rs {
		if r.Error != "" {
			return r
		}
		tps = append(tps, r.DecodeTokS)
	}
	sorted := slices.SortedFunc(slices.Values(rs), func(a, b batchResult) int { return cmp.Compare(a.DecodeTokS, b.DecodeTokS) })
	m := sorted[len(sorted)/2]
	m.Runs = tps
	return m
}

// fill computes the figures from each stream's token arrival times.
func (b *batchResult) fill(start time.Time, times [][]time.Time) {
	lastFirst, firstEnd := times[0][0], times[0][len(times[0])-1]
	var ttft time.Duration
	for _, ts := range times {
		b.Tokens += len(ts)
		ttft += ts[0].Sub(start)
		if ts[0].After(lastFirst) {
			lastFirst = ts[0]
		}
		if end := ts[len(ts)-1]; end.Before(firstEnd) {
			firstEnd = end
		}
	}
	b.MeanTTFTms = float64(ttft.Milliseconds()) / float64(len(times))
	window := firstEnd.Sub(lastFirst).Seconds()
	count := 0
	for _, ts := range times {
		for _, t := range ts {
			if t.After(lastFirst) && !t.After(firstEnd) {
				count++
			}
		}
	}
	if window > 0 {
		b.DecodeTokS = float64(count) / window
		b.PerStreamTokS = b.DecodeTokS / float64(len(times))
	}
}

// streamTimes runs one request and returns the arrival time of each token.
func streamTimes(ctx context.Context, r *runner.Runner, req *engine.Request) ([]time.Time, error) {
	ts, _, err := specTimes(ctx, r, req)
	return ts, err
}

// forwardOnly times decode steps of each level's number of rows straight
// through model.Forward (sequences prefilled with promptLen tokens), the
// ceiling the scheduler's aggregate is compared with. A non-nil profile
// receives a CPU profile of the last level's steps.
func forwardOnly(ctx context.Context, path string, rows []batchResult, promptLen, threads int, profile io.Writer) error {
	be := cpu.New(cpu.Options{Threads: threads})
	defer be.Close()
	m, err := model.Load(ctx, path, be, model.Options{})
	if err != nil {
		return err
	}
	defer m.Close()
	const steps = 16
	for i := range rows {
		n := rows[i].Streams
		in := make([]model.Input, n)
		for j := range in {
			seq, err := m.NewSequence(promptLen + steps + 1)
			if err != nil {
				return err
			}
			defer seq.Close()
			toks := make([]int, promptLen)
			for k := range toks {
				toks[k] = (j*104729 + k*7919 + 13) % 150000
			}
			in[j] = model.Input{Seq: seq, Tokens: toks}
		}
		if _, err := m.Forward(ctx, in, model.Range{}, nil); err != nil {
			return err
		}
		if profile != nil && i == len(rows)-1 {
			if err := pprof.StartCPUProfile(profile); err != nil {
				return err
			}
			defer pprof.StopCPUProfile()
		}
		start := time.Now()
		for s := range steps {
			for j := range in {
				in[j].Tokens = []int{(s*31 + j) % 150000}
			}
			if _, err := m.Forward(ctx, in, model.Range{}, nil); err != nil {
				return err
			}
		}
		rows[i].ForwardTokS = float64(steps*n) / time.Since(start).Seconds()
		if rows[i].ForwardTokS > 0 {
			rows[i].Efficiency = rows[i].DecodeTokS / rows[i].ForwardTokS
		}
	}
	return nil
}
