package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"fusion/cluster/layersplit"
	"fusion/cluster/pipeline"
	"fusion/engine/model"
	"fusion/engine/modelfile"
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
	// MicroBatches is the first stage's split of the running sequences
	// (0: one micro-batch per stage; 1: one step at a time).
	MicroBatches int
	// Procs runs every later stage as a process of its own (Exe's
	// `bench pipeline-stage`, started through taskset) on a core of its
	// own: stage i on CPU i mod the CPUs, the first stage (this process,
	// with the load generator) pinned to CPU 0, one compute goroutine
	// each. Without it every stage shares this process's cores.
	Procs bool
	Exe   string // the fusion binary (Procs)
	// Split is how the layers are divided: "even" (the same number on
	// each stage) or "balanced" (the same weights to read per token on
	// each stage, the last stage's output head counted: on the
	// Qwen3-0.6B shape the head weighs as much as ten layers).
	Split string
}

// DefaultPipelineOptions are the settings `make bench` uses.
func DefaultPipelineOptions() PipelineOptions {
	return PipelineOptions{CacheDir: DefaultCacheDir, Layers: 6, Stages: []int{1, 2, 3}, Streams: []int{1, 8}, Prompt: 16, Decode: 16, LogitsBack: true, Repeat: 3, Split: "balanced"}
}

type pipelineRow struct {
	Stages int `json:"stages"`
	// Back is what the last stage sends back: "tokens" (it samples) or
	// "logits" (the first stage samples); "" for one stage.
	Back   string        `json:"back,omitempty"`
	Bounds []int         `json:"layer_bounds,omitempty"` // stage i runs layers [bounds[i], bounds[i+1])
	Levels []batchResult `json:"levels"`
	// AddedMsPerHop is, for one stream, the per-token latency over the
	// one-stage figure divided by the hops (stages − 1).
	AddedMsPerHop float64 `json:"added_ms_per_token_per_hop,omitempty"`
	// HopBytesPerToken is the hidden state's bytes per token position
	// sent down the first hop (every hop carries the same), as measured by
	// the first stage's link, and HopDType its wire type.
	HopBytesPerToken float64 `json:"hop_bytes_per_token,omitempty"`
	HopDType         string  `json:"hop_dtype,omitempty"`
	// Profiles are, for each level of Levels, where each stage spent the
	// median run's time (stage order).
	Profiles [][]stageProfile `json:"stage_profiles,omitempty"`
	Error    string           `json:"error,omitempty"`
}

// stageProfile is where one stage spent a level's run, in percent of the
// run's wall time. For the first stage (the runner's, in the benchmark's
// process): CPUBusy is that process's CPU time (with the load generator
// and the gRPC client), Wait the time its scheduler was blocked on the
// later stages' answers, Send the time handing steps to the link. For a
// later stage: CPUBusy its process's CPU time (with -procs), and its
// stream loop's Forward, Sample, Send and Idle (pipeline.Counts).
type stageProfile struct {
	Stage       int     `json:"stage"`
	CPUBusyPct  float64 `json:"cpu_busy_pct,omitempty"`
	ForwardPct  float64 `json:"forward_pct,omitempty"`
	SamplePct   float64 `json:"sample_pct,omitempty"`
	SendPct     float64 `json:"send_pct,omitempty"`
	IdlePct     float64 `json:"idle_pct,omitempty"`
	WaitPct     float64 `json:"wait_pct,omitempty"`
	Steps       int64   `json:"steps,omitempty"`
	RowsPerStep float64 `json:"rows_per_step,omitempty"`
	// CPUmsPerToken is the stage's CPU time over the tokens the level
	// produced: on a machine shared with other work (whose wall times
	// mean little) what the stage costs; the slowest stage's bounds the
	// pipeline's rate when each stage has a core of its own.
	CPUmsPerToken float64 `json:"cpu_ms_per_token,omitempty"`
}

// stageStats are a stage's running totals (a later stage's: its
// process's CPU time and its Pipeline server's counts; the first stage's:
// the benchmark process's CPU time and its link's timings).
type stageStats struct {
	CPU    time.Duration   `json:"cpu_ns"`
	Counts pipeline.Counts `json:"counts"`
	Wait   time.Duration   `json:"wait_ns"`
}

// profile is the difference of two snapshots over wall.
func (a stageStats) profile(stage int, b stageStats, wall time.Duration) stageProfile {
	pct := func(d time.Duration) float64 { return math.Round(1000*float64(d)/float64(wall)) / 10 }
	p := stageProfile{Stage: stage, CPUBusyPct: pct(b.CPU - a.CPU), ForwardPct: pct(b.Counts.Forward - a.Counts.Forward),
		SamplePct: pct(b.Counts.Sample - a.Counts.Sample), SendPct: pct(b.Counts.Send - a.Counts.Send),
		IdlePct: pct(b.Counts.Idle - a.Counts.Idle), WaitPct: pct(b.Wait - a.Wait), Steps: b.Counts.Steps - a.Counts.Steps}
	if p.Steps > 0 {
		p.RowsPerStep = math.Round(100*float64(b.Counts.Rows-a.Counts.Rows)/float64(p.Steps)) / 100
	}
	return p
}

// Pipeline measures a model split into 1, 2 and 3 pipeline stages on
// loopback: the first stage is the runner's (scheduler, sampling), the
// later ones Pipeline gRPC servers in this process, linked by the real
// streams. All stages share this process's cores, so the figures are the
// protocol's cost (hidden states down, tokens — or, for comparison,
// logits — back, one step in flight), not the speed-up of stages on
// machines of their own.
func Pipeline(ctx context.Context, o PipelineOptions, stdout, stderr io.Writer) error {
	if o.Split != "even" && o.Split != "balanced" {
		return optionErrorf("pipeline: -split is even or balanced, not %q", o.Split)
	}
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
		"hidden_size":                 shape.Hidden,
		"logits_bytes_per_token_back": text.Tokenizer().VocabSize() * 4,
		"token_back":                  "a token id, its generator state and the logprobs asked for: tens of bytes",
		"prompt":                      o.Prompt,
		"repeat":                      o.Repeat,
		"decode":                      o.Decode,
		"note": "every stage in this process on loopback, sharing its cores: the cost of the hops, not a speed-up " +
			"(see cluster/DESIGN.md for the bound with a machine per stage)",
		"micro_batches": o.MicroBatches,
		"split":         o.Split,
	}
	cfg, err := modelfile.LoadConfig(path)
	if err != nil {
		return err
	}
	out["head_layers"] = cfg.HeadLayers()
	if o.Procs {
		out["note"] = fmt.Sprintf("stage i in a process of its own on CPU i mod %d (taskset; the first stage, with the load generator, "+
			"pinned to CPU 0), one compute goroutine per stage, gRPC over loopback", runtime.NumCPU())
		o.Threads = 1
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
			rows = append(rows, pipelineRow{Stages: k, Back: back, Bounds: stageBounds(o.Layers, k, o.Split, cfg.HeadLayers())})
		}
	}
	start := loadAverage()
	// Round after round over the rows, so that the machine's drift (other
	// work on a shared VM) spreads over all of them.
	runs := make([][][]batchResult, len(rows))     // row, level, run
	profs := make([][][][]stageProfile, len(rows)) // row, level, run, stage
	for rep := range o.Repeat {
		for i := range rows {
			row := &rows[i]
			if row.Error != "" {
				continue
			}
			fmt.Fprintf(stderr, "bench pipeline: round %d, %d stages %s\n", rep+1, row.Stages, row.Back)
			levels, profiles, hop, err := runPipeline(ctx, path, row.Bounds, row.Back == "logits", o, text)
			if err != nil {
				row.Error = err.Error()
				continue
			}
			if hop.Rows > 0 {
				row.HopBytesPerToken = float64(hop.Bytes) / float64(hop.Rows)
				row.HopDType = hop.DType
			}
			if runs[i] == nil {
				runs[i] = make([][]batchResult, len(levels))
				profs[i] = make([][][]stageProfile, len(levels))
			}
			for j, l := range levels {
				runs[i][j] = append(runs[i][j], l)
				profs[i][j] = append(profs[i][j], profiles[j])
			}
		}
	}
	for i := range rows {
		if rows[i].Error != "" {
			continue
		}
		for j, rs := range runs[i] {
			m := medianRun(rs)
			rows[i].Levels = append(rows[i].Levels, m)
			rows[i].Profiles = append(rows[i].Profiles, profs[i][j][slices.IndexFunc(rs, func(r batchResult) bool { return r.DecodeTokS == m.DecodeTokS })])
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
	out["load_average"] = map[string]string{"start": start, "end": loadAverage()}
	return json.NewEncoder(stdout).Encode(out)
}

// loadAverage is the machine's 1, 5 and 15-minute load averages (Linux's
// /proc/loadavg; "" elsewhere): on a shared machine the figures mean
// little without it.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// runPipeline serves the model at path in the stages bounds gives and
// runs every concurrency level once after a warm-up; hop is what the
// first stage sent down (zero for one stage).
func runPipeline(ctx context.Context, path string, bounds []int, logitsBack bool, o PipelineOptions, text *prompt.Builder) (levels []batchResult, profiles [][]stageProfile, hop pipeline.WireStats, err error) {
	k := len(bounds) - 1
	dir, name := filepath.Dir(path), filepath.Base(path)
	maxStreams := slices.Max(o.Streams)
	if o.Procs {
		restore, err := pinProcess(0)
		if err != nil {
			return nil, nil, hop, err
		}
		defer restore()
	}
	r, err := runner.New(runner.Config{ModelsDir: dir, Threads: o.Threads, MaxRunning: maxStreams, MaxQueued: maxStreams,
		CacheHotBytes: -1, CacheSSDBytes: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, nil, hop, err
	}
	defer r.Close()
	var cleanup []func()
	defer func() {
		for _, f := range slices.Backward(cleanup) {
			f()
		}
	}()
	var (
		down   *timedLink
		stages []func() (stageStats, error) // the later stages' snapshots
	)
	if k == 1 {
		err = r.Load(ctx, name)
	} else {
		down, stages, err = pipelineStages(ctx, r, path, bounds, logitsBack, o, &cleanup)
	}
	if err != nil {
		return nil, nil, hop, err
	}
	request := fullLengthRequests(text, name, o.Prompt, o.Decode)
	if _, err := streamTimes(ctx, r, request(99)); err != nil { // warm-up
		return nil, nil, hop, err
	}
	snapshot := func() ([]stageStats, error) {
		first := stageStats{CPU: processCPU()}
		if down != nil {
			first.Wait, first.Counts.Send = time.Duration(down.waitNs.Load()), time.Duration(down.sendNs.Load())
		}
		out := []stageStats{first}
		for _, st := range stages {
			s, err := st()
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		return out, nil
	}
	var rows []batchResult
	for _, n := range o.Streams {
		before, err := snapshot()
		if err != nil {
			return rows, profiles, hop, err
		}
		began := time.Now()
		row := runLevel(ctx, r, n, request)
		if row.Error != "" {
			return rows, profiles, hop, errors.New(row.Error)
		}
		wall := time.Since(began)
		after, err := snapshot()
		if err != nil {
			return rows, profiles, hop, err
		}
		var prof []stageProfile
		for i := range before {
			p := before[i].profile(i, after[i], wall)
			if row.Tokens > 0 {
				p.CPUmsPerToken = math.Round(100*float64(after[i].CPU-before[i].CPU)/float64(time.Millisecond)/float64(row.Tokens)) / 100
			}
			prof = append(prof, p)
		}
		rows = append(rows, row)
		profiles = append(profiles, prof)
	}
	if down != nil {
		hop = down.Wire()
	}
	return rows, profiles, hop, nil
}

// timedLink is the first stage's link, timing how long the scheduler
// spends handing steps to it and blocked on their answers.
type timedLink struct {
	*pipeline.Client
	sendNs, waitNs atomic.Int64
}

var _ runner.Starter = (*timedLink)(nil)

func (l *timedLink) Start(ctx context.Context, seqs []runner.StageSeq, h *model.Hidden) (func() ([]runner.StageResult, error), error) {
	t := time.Now()
	wait, err := l.Client.Start(ctx, seqs, h)
	l.sendNs.Add(int64(time.Since(t)))
	if err != nil {
		return nil, err
	}
	return func() ([]runner.StageResult, error) {
		t := time.Now()
		defer func() { l.waitNs.Add(int64(time.Since(t))) }()
		return wait()
	}, nil
}

func (l *timedLink) Step(ctx context.Context, seqs []runner.StageSeq, h *model.Hidden) ([]runner.StageResult, error) {
	wait, err := l.Start(ctx, seqs, h)
	if err != nil {
		return nil, err
	}
	return wait()
}

// stageBounds splits layers over k stages: evenly, or ("balanced") by
// compute cost per token, the output head (head layers' worth) on the
// last stage — the cluster planner's split (layersplit), unbounded by
// memory.
func stageBounds(layers, k int, split string, head float64) []int {
	if split == "balanced" {
		if b, ok := layersplit.Split(layersplit.Model{Layers: layers, Head: head}, k, nil); ok {
			return b
		}
	}
	bounds := make([]int, k+1)
	for i := range bounds {
		bounds[i] = i * layers / k
	}
	return bounds
}

// pipelineStages loads stages 1..k−1 as Pipeline servers on loopback (in
// this process, or with o.Procs each in a process of its own) and makes
// the runner's model the first stage on the layers bounds gives.
func pipelineStages(ctx context.Context, r *runner.Runner, path string, bounds []int, logitsBack bool, o PipelineOptions, cleanup *[]func()) (*timedLink, []func() (stageStats, error), error) {
	name := filepath.Base(path)
	k := len(bounds) - 1
	dial := func(addr string) (grpc.ClientConnInterface, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	next := ""
	stats := make([]func() (stageStats, error), k-1) // stage i's at i−1
	for i := k - 1; i >= 1; i-- {
		layers := model.Range{Start: bounds[i], End: bounds[i+1]}
		if o.Procs {
			proc, err := startStageProc(ctx, o.Exe, path, layers, next, i%runtime.NumCPU())
			if err != nil {
				return nil, nil, err
			}
			*cleanup = append(*cleanup, proc.stop)
			next, stats[i-1] = proc.addr, proc.stats
			continue
		}
		sm, err := r.LoadStage(ctx, name, layers)
		if err != nil {
			return nil, nil, err
		}
		*cleanup = append(*cleanup, func() { sm.Close() })
		addr, srv, stop, err := serveStage(sm.Model, next, dial)
		if err != nil {
			return nil, nil, err
		}
		*cleanup = append(*cleanup, stop)
		next = addr
		stats[i-1] = func() (stageStats, error) { return stageStats{Counts: srv.Counts()}, nil }
	}
	down := &timedLink{Client: pipeline.NewClient(name, 1, next, dial)}
	p := &runner.Pipeline{Layers: model.Range{Start: 0, End: bounds[1]}, Generation: 1, Down: down, LogitsBack: logitsBack,
		Stages: k, MicroBatches: o.MicroBatches}
	if err := r.SetPipeline(ctx, name, p); err != nil {
		down.Close()
		return nil, nil, err
	}
	return down, stats, nil
}

// serveStage serves m as a later stage (generation 1) on a loopback port.
func serveStage(m *model.Model, next string, dial pipeline.Dial) (addr string, srv *pipeline.Server, stop func(), err error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, err
	}
	gs := grpc.NewServer()
	st := pipeline.Stage{Generation: 1, Model: m, Next: next}
	srv = pipeline.Register(gs, func(string) (pipeline.Stage, bool) { return st, true }, dial, nil)
	go gs.Serve(lis)
	return lis.Addr().String(), srv, gs.Stop, nil
}

// stageProc is a stage process of -procs.
type stageProc struct {
	addr  string
	stop  func()
	stats func() (stageStats, error) // asks the process for its totals
}

// startStageProc starts `exe bench pipeline-stage` for layers of the
// model at path on CPU cpu (taskset): it serves at the address it writes
// first, and answers each "stats" line on its stdin with a line of its
// totals (stageStats).
func startStageProc(ctx context.Context, exe, path string, layers model.Range, next string, cpu int) (*stageProc, error) {
	if exe == "" {
		return nil, optionErrorf("pipeline: -procs needs the fusion binary")
	}
	cmd := exec.CommandContext(ctx, "taskset", "-c", strconv.Itoa(cpu), exe, "bench", "pipeline-stage",
		"-model", path, "-start", strconv.Itoa(layers.Start), "-end", strconv.Itoa(layers.End), "-next", next)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pipeline: starting a stage process: %w", err)
	}
	stop := func() {
		stdin.Close() // the stage ends when its stdin does
		_ = cmd.Wait()
	}
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		stop()
		return nil, fmt.Errorf("pipeline: stage process of layers %v: %q, %v", layers, line, err)
	}
	stats := func() (stageStats, error) {
		var st stageStats
		if _, err := io.WriteString(stdin, "stats\n"); err != nil {
			return st, fmt.Errorf("pipeline: stage process of layers %v: %w", layers, err)
		}
		line, err := out.ReadString('\n')
		js, ok := strings.CutPrefix(strings.TrimSpace(line), "stats ")
		if err != nil || !ok {
			return st, fmt.Errorf("pipeline: stage process of layers %v: %q, %v", layers, line, err)
		}
		return st, json.Unmarshal([]byte(js), &st)
	}
	return &stageProc{addr: addr, stop: stop, stats: stats}, nil
}

// PipelineStageOptions are those of one stage process (`bench
// pipeline-stage`, started by the pipeline benchmark with -procs).
type PipelineStageOptions struct {
	Model      string // model directory
	Start, End int    // layers
	Next       string // the next stage's address ("" on the last)
}

// PipelineStage serves layers of a model as a later pipeline stage on a
// loopback port, with one compute goroutine: it writes "listening ADDR",
// answers each "stats" line on stdin with "stats JSON" (its CPU time and
// its server's counts: stageStats), and serves until stdin closes (its
// parent went away) or ctx ends.
func PipelineStage(ctx context.Context, o PipelineStageOptions, stdin io.Reader, stdout io.Writer) error {
	r, err := runner.New(runner.Config{ModelsDir: filepath.Dir(o.Model), Threads: 1, CacheHotBytes: -1, CacheSSDBytes: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	defer r.Close()
	sm, err := r.LoadStage(ctx, filepath.Base(o.Model), model.Range{Start: o.Start, End: o.End})
	if err != nil {
		return err
	}
	defer sm.Close()
	dial := func(addr string) (grpc.ClientConnInterface, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	addr, srv, stop, err := serveStage(sm.Model, o.Next, dial)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Fprintf(stdout, "listening %s\n", addr)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		lines := bufio.NewScanner(stdin)
		for lines.Scan() {
			if lines.Text() != "stats" {
				continue
			}
			b, err := json.Marshal(stageStats{CPU: processCPU(), Counts: srv.Counts()})
			if err != nil {
				return
			}
			fmt.Fprintf(stdout, "stats %s\n", b)
		}
	}()
	select {
	case <-ended:
	case <-ctx.Done():
	}
	return nil
}
