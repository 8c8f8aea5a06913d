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
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"fusion/cluster/layersplit"
	"fusion/cluster/pipeline"
	"fusion/engine/model"
	"fusion/engine/modelfile"
	"fusion/engine/prompt"
	"fusion/engine/runner"
	"fusion/internal/netsim"
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
	// Links are the link profiles every pipeline of 2 stages or more
	// runs over (netsim.ParseLink): "loopback" (this machine's, no
	// namespaces), or a delay and a rate ("1ms+10gbit") for stages in
	// network namespaces of their own joined by veth pairs, tbf limiting
	// the rate and netem (or, in a kernel without it, a delaying relay)
	// adding the delay one way, each direction. The logits-back rows run
	// on loopback only. A profile that cannot run here (not root, no
	// `ip`) is reported skipped with the reason.
	Links []string
}

// DefaultPipelineOptions are the settings `make bench` uses.
func DefaultPipelineOptions() PipelineOptions {
	return PipelineOptions{CacheDir: DefaultCacheDir, Layers: 6, Stages: []int{1, 2, 3}, Streams: []int{1, 8}, Prompt: 16, Decode: 16, LogitsBack: true, Repeat: 3, Split: "balanced",
		Links: []string{"loopback", "1ms+10gbit", "10ms+1gbit"}}
}

type pipelineRow struct {
	Stages int `json:"stages"`
	// Link is the profile the hops ran over ("loopback", "1ms+10gbit"),
	// DelayMethod how its delay was made ("netem" or "relay") and
	// BandwidthMethod how its rate was limited ("tbf").
	Link            string `json:"link"`
	DelayMethod     string `json:"delay_method,omitempty"`
	BandwidthMethod string `json:"bandwidth_method,omitempty"`
	// Skipped says why the profile could not run here.
	Skipped string `json:"skipped,omitempty"`
	// HopPingMs is the median round trip of a gRPC health check from the
	// first stage to the second over the first hop (the link's own
	// latency, gRPC included).
	HopPingMs float64 `json:"hop_ping_ms,omitempty"`
	// LinkMsPerHop is, for one stream, the per-token latency over the
	// same stages' on loopback divided by the hops: what the link adds.
	LinkMsPerHop float64 `json:"link_added_ms_per_token_per_hop,omitempty"`
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

	link  netsim.Link // the profile's (zero: loopback)
	pings []float64   // every run's hop ping
}

// parseLinks reads the link profiles: the shaped ones, and whether
// "loopback" was among them.
func parseLinks(names []string) (links []netsim.Link, loopback bool, err error) {
	for _, n := range names {
		l, err := netsim.ParseLink(n)
		if err != nil {
			return nil, false, optionErrorf("pipeline: -links: %v", err)
		}
		if l == (netsim.Link{}) {
			loopback = true
			continue
		}
		links = append(links, l)
	}
	return links, loopback, nil
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
// machines of their own. Each link profile of o.Links other than
// loopback runs the pipelines of 2 stages or more again with every stage
// in a network namespace of its own and shaped hops between them
// (internal/netsim), reporting the hop's gRPC ping and what the link adds
// per token and hop.
func Pipeline(ctx context.Context, o PipelineOptions, stdout, stderr io.Writer) error {
	if o.Split != "even" && o.Split != "balanced" {
		return optionErrorf("pipeline: -split is even or balanced, not %q", o.Split)
	}
	if o.Layers < 1 || o.Prompt < 1 || o.Decode < 2 || o.Repeat < 1 || len(o.Stages) == 0 || slices.Min(o.Stages) < 1 || slices.Max(o.Stages) > o.Layers ||
		len(o.Streams) == 0 || slices.Min(o.Streams) < 1 {
		return optionErrorf("pipeline: want -layers ≥ 1, stages in [1, layers], positive streams, prompt and repeat, decode ≥ 2")
	}
	links, loopback, err := parseLinks(o.Links)
	if err != nil {
		return err
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
		"links":         o.Links,
		"link_note": "a profile other than loopback puts stage i in network namespace i of a chain joined by veth pairs, " +
			"tbf limiting each direction's rate and netem (delay_method netem) or, where the kernel has no netem, a delaying TCP relay " +
			"on the dialling side (delay_method relay) adding the delay each way; hop_ping_ms is a gRPC health check over the first hop, " +
			"link_added_ms_per_token_per_hop the one-stream time per token over the same stages' on loopback, per hop; " +
			"with -procs the relays run in this process, on the first stage's core",
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
		case !loopback:
			continue
		case o.LogitsBack:
			backs = append(backs, "logits")
		}
		for _, back := range backs {
			rows = append(rows, pipelineRow{Stages: k, Back: back, Link: "loopback", Bounds: stageBounds(o.Layers, k, o.Split, cfg.HeadLayers())})
		}
	}
	// Every other profile: the pipelines of 2 stages or more, tokens back.
	unavailable := netsim.Available()
	for _, l := range links {
		for _, k := range o.Stages {
			if k == 1 {
				continue
			}
			row := pipelineRow{Stages: k, Back: "tokens", Link: l.String(), link: l, Bounds: stageBounds(o.Layers, k, o.Split, cfg.HeadLayers())}
			if unavailable != nil {
				row.Skipped = unavailable.Error()
				fmt.Fprintf(stderr, "bench pipeline: skipping %d stages over %s: %v\n", k, row.Link, unavailable)
			}
			rows = append(rows, row)
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
			if row.Error != "" || row.Skipped != "" {
				continue
			}
			fmt.Fprintf(stderr, "bench pipeline: round %d, %d stages over %s %s\n", rep+1, row.Stages, row.Link, row.Back)
			levels, profiles, hop, info, err := runPipeline(ctx, path, row.Bounds, row.Back == "logits", row.link, o, text)
			if err != nil {
				row.Error = err.Error()
				continue
			}
			row.DelayMethod, row.BandwidthMethod = info.delayMethod, info.bandwidthMethod
			row.pings = append(row.pings, info.pingMs)
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
		if rows[i].Error != "" || rows[i].Skipped != "" {
			continue
		}
		if len(rows[i].pings) > 0 {
			rows[i].HopPingMs = median(rows[i].pings)
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
	// What each link adds over loopback, per hop, at the same stages.
	for i := range rows {
		r := rows[i]
		if r.Link == "loopback" || len(r.Levels) == 0 || r.Levels[0].Streams != 1 || r.Levels[0].PerStreamTokS <= 0 {
			continue
		}
		j := slices.IndexFunc(rows, func(l pipelineRow) bool {
			return l.Link == "loopback" && l.Stages == r.Stages && l.Back == r.Back && len(l.Levels) > 0 && l.Levels[0].PerStreamTokS > 0
		})
		if j >= 0 {
			rows[i].LinkMsPerHop = (1000/r.Levels[0].PerStreamTokS - 1000/rows[j].Levels[0].PerStreamTokS) / float64(r.Stages-1)
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

// linkInfo is what a run learnt of its hops: their gRPC ping and how
// their shape was made.
type linkInfo struct {
	pingMs                       float64
	delayMethod, bandwidthMethod string
}

// runPipeline serves the model at path in the stages bounds gives, its
// hops over link (zero: loopback), and runs every concurrency level once
// after a warm-up; hop is what the first stage sent down (zero for one
// stage).
func runPipeline(ctx context.Context, path string, bounds []int, logitsBack bool, link netsim.Link, o PipelineOptions, text *prompt.Builder) (levels []batchResult, profiles [][]stageProfile, hop pipeline.WireStats, info linkInfo, err error) {
	k := len(bounds) - 1
	dir, name := filepath.Dir(path), filepath.Base(path)
	maxStreams := slices.Max(o.Streams)
	if o.Procs {
		restore, err := pinProcess(0)
		if err != nil {
			return nil, nil, hop, info, err
		}
		defer restore()
	}
	r, err := runner.New(runner.Config{ModelsDir: dir, Threads: o.Threads, MaxRunning: maxStreams, MaxQueued: maxStreams,
		CacheHotBytes: -1, CacheSSDBytes: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, nil, hop, info, err
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
		down, stages, info, err = pipelineStages(ctx, r, path, bounds, logitsBack, link, o, &cleanup)
	}
	if err != nil {
		return nil, nil, hop, info, err
	}
	request := fullLengthRequests(text, name, o.Prompt, o.Decode)
	if _, err := streamTimes(ctx, r, request(99)); err != nil { // warm-up
		return nil, nil, hop, info, err
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
			return rows, profiles, hop, info, err
		}
		began := time.Now()
		row := runLevel(ctx, r, n, request)
		if row.Error != "" {
			return rows, profiles, hop, info, errors.New(row.Error)
		}
		wall := time.Since(began)
		after, err := snapshot()
		if err != nil {
			return rows, profiles, hop, info, err
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
	return rows, profiles, hop, info, nil
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

// pipelineStages loads stages 1..k−1 as Pipeline servers (in this
// process, or with o.Procs each in a process of its own) and makes the
// runner's model the first stage on the layers bounds gives. Over the
// zero link they listen on loopback; over another, stage i is in node i
// of a netsim.Chain (its sockets, or its process, in the node's network
// namespace) and dials stage i+1 over the shaped hop between them.
func pipelineStages(ctx context.Context, r *runner.Runner, path string, bounds []int, logitsBack bool, link netsim.Link, o PipelineOptions, cleanup *[]func()) (*timedLink, []func() (stageStats, error), linkInfo, error) {
	name := filepath.Base(path)
	k := len(bounds) - 1
	var info linkInfo
	h, err := newHops(ctx, k, link)
	if err != nil {
		return nil, nil, info, err
	}
	*cleanup = append(*cleanup, h.close)
	next := ""
	stats := make([]func() (stageStats, error), k-1) // stage i's at i−1
	for i := k - 1; i >= 1; i-- {
		layers := model.Range{Start: bounds[i], End: bounds[i+1]}
		via, err := h.via(i, next)
		if err != nil {
			return nil, nil, info, err
		}
		if o.Procs {
			proc, err := startStageProc(ctx, o.Exe, path, layers, via, i%runtime.NumCPU(), h.namespace(i), h.listenAddr(i))
			if err != nil {
				return nil, nil, info, err
			}
			*cleanup = append(*cleanup, proc.stop)
			next, stats[i-1] = proc.addr, proc.stats
			continue
		}
		sm, err := r.LoadStage(ctx, name, layers)
		if err != nil {
			return nil, nil, info, err
		}
		*cleanup = append(*cleanup, func() { sm.Close() })
		lis, err := h.listen(i)
		if err != nil {
			return nil, nil, info, err
		}
		addr, srv, stop := serveStage(lis, sm.Model, via, h.dial(i))
		*cleanup = append(*cleanup, stop)
		next = addr
		stats[i-1] = func() (stageStats, error) { return stageStats{Counts: srv.Counts()}, nil }
	}
	first, err := h.via(0, next)
	if err != nil {
		return nil, nil, info, err
	}
	if info.pingMs, err = pingMs(ctx, h.dial(0), first); err != nil {
		return nil, nil, info, err
	}
	if h.chain != nil {
		info.delayMethod, info.bandwidthMethod = h.chain.DelayMethod, h.chain.BandwidthMethod
	}
	down := &timedLink{Client: pipeline.NewClient(name, 1, first, h.dial(0))}
	p := &runner.Pipeline{Layers: model.Range{Start: 0, End: bounds[1]}, Generation: 1, Down: down, LogitsBack: logitsBack,
		Stages: k, MicroBatches: o.MicroBatches}
	if err := r.SetPipeline(ctx, name, p); err != nil {
		down.Close()
		return nil, nil, info, err
	}
	return down, stats, info, nil
}

// hops are the links between the stages: loopback (chain nil) or a
// netsim.Chain's shaped hops.
type hops struct{ chain *netsim.Chain }

func newHops(ctx context.Context, k int, link netsim.Link) (hops, error) {
	if link == (netsim.Link{}) {
		return hops{}, nil
	}
	c, err := netsim.NewChain(ctx, k, link)
	return hops{chain: c}, err
}

func (h hops) close() {
	if h.chain != nil {
		_ = h.chain.Close()
	}
}

// dial is stage i's gRPC dial (from its namespace).
func (h hops) dial(i int) pipeline.Dial {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if h.chain != nil {
		d := h.chain.Dialer(i)
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d(ctx, "tcp", addr) }))
	}
	return func(addr string) (grpc.ClientConnInterface, error) {
		if h.chain != nil {
			addr = "passthrough:///" + addr
		}
		return grpc.NewClient(addr, opts...)
	}
}

// listenAddr is where stage i listens: loopback, or its address on the
// hop from stage i−1.
func (h hops) listenAddr(i int) string {
	if h.chain == nil {
		return "127.0.0.1:0"
	}
	return net.JoinHostPort(h.chain.Addr(i), "0")
}

func (h hops) listen(i int) (net.Listener, error) {
	if h.chain == nil {
		return net.Listen("tcp", h.listenAddr(i))
	}
	return h.chain.Listen(i, h.listenAddr(i))
}

// namespace is stage i's network namespace ("" on loopback).
func (h hops) namespace(i int) string {
	if h.chain == nil {
		return ""
	}
	return h.chain.Namespace(i)
}

// via is the address stage i dials for target ("": none) on stage i+1.
func (h hops) via(i int, target string) (string, error) {
	if h.chain == nil || target == "" {
		return target, nil
	}
	return h.chain.Via(i, target)
}

// pingMs is the median round trip of 9 gRPC health checks to addr
// through dial, in milliseconds, after one to connect.
func pingMs(ctx context.Context, dial pipeline.Dial, addr string) (float64, error) {
	cc, err := dial(addr)
	if err != nil {
		return 0, err
	}
	if c, ok := cc.(io.Closer); ok {
		defer c.Close()
	}
	hc := healthpb.NewHealthClient(cc)
	var ms []float64
	for i := range 10 {
		start := time.Now()
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			return 0, fmt.Errorf("pipeline: ping over the first hop: %w", err)
		}
		if i > 0 {
			ms = append(ms, float64(time.Since(start).Microseconds())/1000)
		}
	}
	return median(ms), nil
}

// serveStage serves m as a later stage (generation 1) on lis, with a
// gRPC health service for pingMs.
func serveStage(lis net.Listener, m *model.Model, next string, dial pipeline.Dial) (addr string, srv *pipeline.Server, stop func()) {
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	st := pipeline.Stage{Generation: 1, Model: m, Next: next}
	srv = pipeline.Register(gs, func(string) (pipeline.Stage, bool) { return st, true }, dial, nil)
	go gs.Serve(lis)
	return lis.Addr().String(), srv, gs.Stop
}

// stageProc is a stage process of -procs.
type stageProc struct {
	addr  string
	stop  func()
	stats func() (stageStats, error) // asks the process for its totals
}

// startStageProc starts `exe bench pipeline-stage` for layers of the
// model at path on CPU cpu (taskset), in network namespace ns (ip netns
// exec; "": this process's), listening on listen: it serves at the
// address it writes first, and answers each "stats" line on its stdin
// with a line of its totals (stageStats).
func startStageProc(ctx context.Context, exe, path string, layers model.Range, next string, cpu int, ns, listen string) (*stageProc, error) {
	if exe == "" {
		return nil, optionErrorf("pipeline: -procs needs the fusion binary")
	}
	args := []string{"taskset", "-c", strconv.Itoa(cpu), exe, "bench", "pipeline-stage",
		"-model", path, "-start", strconv.Itoa(layers.Start), "-end", strconv.Itoa(layers.End), "-next", next, "-listen", listen}
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
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
	Listen     string // the address to serve on ("": a loopback port)
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
	listen := o.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	addr, srv, stop := serveStage(lis, sm.Model, o.Next, dial)
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
