package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"fusion/cluster/pipeline"
	"fusion/engine/model"
	"fusion/engine/prompt"
	"fusion/engine/runner"
)

// PipelineOptions are the settings of the pipeline benchmark.
type PipelineOptions struct {
	CacheDir string // directory the benchmark model is created in (reused)
	Layers   int    // layers of the Qwen3-0.6B-shaped model
	Stages   []int  // pipeline lengths to run
	Streams  []int  // concurrency levels
	Prompt   int    // prompt tokens per stream
	Decode   int    // greedy tokens per stream
	Threads  int    // compute goroutines per stage (0: all cores)
	// LogitsBack also runs every pipeline of 2 or more stages with the
	// last stage's logits sent back for the first to sample (the way
	// before sampling moved to the last stage), for comparison.
	LogitsBack bool
	// Repeat is the runs of every row, interleaved (round after round
	// over the rows); each level reports its median run.
	Repeat int
}

// DefaultPipelineOptions are the settings `make bench` uses.
func DefaultPipelineOptions() PipelineOptions {
	return PipelineOptions{CacheDir: DefaultCacheDir, Layers: 6, Stages: []int{1, 2, 3}, Streams: []int{1, 8}, Prompt: 16, Decode: 16, LogitsBack: true, Repeat: 3}
}

type pipelineRow struct {
	Stages int `json:"stages"`
	// Back is what the last stage sends back: "tokens" (it samples) or
	// "logits" (the first stage samples); "" for one stage.
	Back   string        `json:"back,omitempty"`
	Levels []batchResult `json:"levels"`
	// AddedMsPerHop is, for one stream, the per-token latency over the
	// one-stage figure divided by the hops (stages − 1).
	AddedMsPerHop float64 `json:"added_ms_per_token_per_hop,omitempty"`
	Error         string  `json:"error,omitempty"`
}

// Pipeline measures a model split into 1, 2 and 3 pipeline stages on
// loopback: the first stage is the runner's (scheduler, sampling), the
// later ones Pipeline gRPC servers in this process, linked by the real
// streams. All stages share this process's cores, so the figures are the
// protocol's cost (hidden states down, tokens — or, for comparison,
// logits — back, one step in flight), not the speed-up of stages on
// machines of their own.
func Pipeline(ctx context.Context, o PipelineOptions, stdout, stderr io.Writer) error {
	if o.Layers < 1 || o.Prompt < 1 || o.Decode < 2 || o.Repeat < 1 || len(o.Stages) == 0 || slices.Min(o.Stages) < 1 || slices.Max(o.Stages) > o.Layers ||
		len(o.Streams) == 0 || slices.Min(o.Streams) < 1 {
		return optionErrorf("pipeline: want -layers ≥ 1, stages in [1, layers], positive streams, prompt and repeat, decode ≥ 2")
	}
	shape := demo0p6Shape()
	shape.Layers = o.Layers
	f := engineFormat{name: "bf16", opts: shape}
	path, err := benchModelAt(filepath.Join(o.CacheDir, fmt.Sprintf("qwen3-0.6b-shape-%dl-bf16", o.Layers)), f)
	if err != nil {
		return err
	}
	text, err := prompt.Load(path)
	if err != nil {
		return err
	}
	out := map[string]any{
		"model":                       fmt.Sprintf("random weights shaped like Qwen3-0.6B with %d layers, bf16", o.Layers),
		"hidden_bytes_per_token":      shape.Hidden * 4,
		"logits_bytes_per_token_back": text.Tokenizer().VocabSize() * 4,
		"token_back":                  "a token id, its generator state and the logprobs asked for: tens of bytes",
		"prompt":                      o.Prompt,
		"repeat":                      o.Repeat,
		"decode":                      o.Decode,
		"note": "every stage in this process on loopback, sharing its cores: the cost of the hops, not a speed-up " +
			"(see cluster/DESIGN.md for the bound with a machine per stage)",
	}
	var rows []pipelineRow
	for _, k := range o.Stages {
		backs := []string{"tokens"}
		switch {
		case k == 1:
			backs = []string{""}
		case o.LogitsBack:
			backs = append(backs, "logits")
		}
		for _, back := range backs {
			rows = append(rows, pipelineRow{Stages: k, Back: back})
		}
	}
	// Round after round over the rows, so that the machine's drift (other
	// work on a shared VM) spreads over all of them.
	runs := make([][][]batchResult, len(rows)) // row, level, run
	for rep := range o.Repeat {
		for i := range rows {
			row := &rows[i]
			if row.Error != "" {
				continue
			}
			fmt.Fprintf(stderr, "bench pipeline: round %d, %d stages %s\n", rep+1, row.Stages, row.Back)
			levels, err := runPipeline(ctx, path, row.Stages, row.Back == "logits", o, text)
			if err != nil {
				row.Error = err.Error()
				continue
			}
			if runs[i] == nil {
				runs[i] = make([][]batchResult, len(levels))
			}
			for j, l := range levels {
				runs[i][j] = append(runs[i][j], l)
			}
		}
	}
	for i := range rows {
		if rows[i].Error != "" {
			continue
		}
		for _, rs := range runs[i] {
			rows[i].Levels = append(rows[i].Levels, medianRun(rs))
		}
	}
	if len(rows) > 0 && rows[0].Stages == 1 && len(rows[0].Levels) > 0 && rows[0].Levels[0].Streams == 1 && rows[0].Levels[0].PerStreamTokS > 0 {
		base := 1000 / rows[0].Levels[0].PerStreamTokS
		for i := range rows {
			if r := rows[i]; r.Stages > 1 && len(r.Levels) > 0 && r.Levels[0].PerStreamTokS > 0 {
				rows[i].AddedMsPerHop = (1000/r.Levels[0].PerStreamTokS - base) / float64(r.Stages-1)
			}
		}
	}
	out["runs"] = rows
	return json.NewEncoder(stdout).Encode(out)
}

// runPipeline serves the model at path in k stages and runs every
// concurrency level once after a warm-up.
func runPipeline(ctx context.Context, path string, k int, logitsBack bool, o PipelineOptions, text *prompt.Builder) ([]batchResult, error) {
	dir, name := filepath.Dir(path), filepath.Base(path)
	maxStreams := slices.Max(o.Streams)
	r, err := runner.New(runner.Config{ModelsDir: dir, Threads: o.Threads, MaxRunning: maxStreams, MaxQueued: maxStreams,
		CacheHotBytes: -1, CacheSSDBytes: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var cleanup []func()
	defer func() {
		for _, f := range slices.Backward(cleanup) {
			f()
		}
	}()
	if k == 1 {
		err = r.Load(ctx, name)
	} else {
		err = pipelineStages(ctx, r, name, k, o.Layers, logitsBack, &cleanup)
	}
	if err != nil {
		return nil, err
	}
	request := fullLengthRequests(text, name, o.Prompt, o.Decode)
	if _, err := streamTimes(ctx, r, request(99)); err != nil { // warm-up
		return nil, err
	}
	var rows []batchResult
	for _, n := range o.Streams {
		row := runLevel(ctx, r, n, request)
		if row.Error != "" {
			return rows, errors.New(row.Error)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// pipelineStages loads stages 1..k−1 as Pipeline servers on loopback and
// makes the runner's model the first stage; layers are split evenly.
func pipelineStages(ctx context.Context, r *runner.Runner, name string, k, layers int, logitsBack bool, cleanup *[]func()) error {
	bounds := make([]int, k+1)
	for i := range bounds {
		bounds[i] = i * layers / k
	}
	dial := func(addr string) (grpc.ClientConnInterface, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	next := ""
	for i := k - 1; i >= 1; i-- {
		sm, err := r.LoadStage(ctx, name, model.Range{Start: bounds[i], End: bounds[i+1]})
		if err != nil {
			return err
		}
		*cleanup = append(*cleanup, func() { sm.Close() })
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		gs := grpc.NewServer()
		st := pipeline.Stage{Generation: 1, Model: sm.Model, Next: next}
		pipeline.Register(gs, func(string) (pipeline.Stage, bool) { return st, true }, dial, nil)
		go gs.Serve(lis)
		*cleanup = append(*cleanup, gs.Stop)
		next = lis.Addr().String()
	}
	down := pipeline.NewClient(name, 1, next, dial)
	if err := r.SetPipeline(ctx, name, &runner.Pipeline{Layers: model.Range{Start: 0, End: bounds[1]}, Generation: 1, Down: down, LogitsBack: logitsBack}); err != nil {
		down.Close()
		return err
	}
	return nil
}
