package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"fusion/engine/backend/cpu"
	"fusion/engine/backend/cpu/kernels"
	"fusion/engine/demo"
	"fusion/engine/model"
)

type engineSpeed struct {
	Prefill float64 `json:"prefill_tok_s"`
	Decode  float64 `json:"decode_tok_s"`
	// DecodeEmpty is decode from an empty context (llama-bench's plain tg
	// test) where Decode is after the prompt: in ratios, and in
	// llama-bench's figures (its tg test at the prompt's depth, -d).
	DecodeEmpty float64 `json:"decode_empty_context_tok_s,omitempty"`
}

// engineFormat is one weight layout of the benchmark model.
type engineFormat struct {
	name string
	opts demo.Options
}

type engineResult struct {
	Path              string       `json:"path"`
	LoadSeconds       float64      `json:"load_s"`
	WeightBytes       int64        `json:"weight_bytes"`
	PrefillTokS       float64      `json:"prefill_tok_s"`
	PrefillRuns       []float64    `json:"prefill_tok_s_runs"`
	DecodeTokS        float64      `json:"decode_tok_s"`
	DecodeEmptyTokS   float64      `json:"decode_empty_context_tok_s"`
	PeakRSSBytes      int64        `json:"peak_rss_bytes"`
	KVAllocatedBytes  int64        `json:"kv_cache_allocated_bytes"`
	KVUsedBytes       int64        `json:"kv_cache_used_bytes"`
	DecodeBytesPerTok int64        `json:"decode_bytes_per_token"`
	DecodeGBs         float64      `json:"decode_bandwidth_gb_s"`
	BandwidthFraction float64      `json:"decode_bandwidth_fraction"`
	LlamaBench        *engineSpeed `json:"llama_bench,omitempty"`
	VsLlamaBench      *engineSpeed `json:"vs_llama_bench,omitempty"`
	LlamaBenchError   string       `json:"llama_bench_error,omitempty"`
	Error             string       `json:"error,omitempty"`
}

// EngineOptions are the settings of the engine benchmark.
type EngineOptions struct {
	CacheDir   string   // directory the benchmark models are created in (reused)
	Prompt     int      // prompt tokens (one prefill step)
	Decode     int      // greedy decode steps
	Formats    []string // formats to run: bf16, mlx-q4, gguf-q4_k_m
	Threads    int      // compute goroutines (0: all cores)
	Repeat     int      // prefill runs per format after a warm-up step; the median is reported
	CPUProfile string   // file for a CPU profile of the decode steps (one format in Formats)
	// LlamaBench names a llama-bench binary to run on the same GGUF in
	// the same run, on as many threads ("": none; `make bench` passes
	// the build of scripts/llamacpp.sh).
	LlamaBench string
}

// DefaultEngineOptions are the settings `make bench` uses.
func DefaultEngineOptions() EngineOptions {
	return EngineOptions{CacheDir: DefaultCacheDir, Prompt: 512, Decode: 128,
		Formats: []string{"bf16", "mlx-q4", "gguf-q4_k_m"}, Repeat: 3}
}

// Engine measures the CPU engine on a random-weight model shaped like
// Qwen3-0.6B (28 layers, hidden 1024, 16/8 heads of 128, intermediate
// 3072, the real 151,936-row vocabulary) in BF16, MLX 4-bit and GGUF
// Q4_K_M: prefill and decode tokens/s, peak RSS, and the fraction of the
// machine's streaming-read bandwidth (measured in the same run) that
// decoding achieves. The models are created once into a cache directory.
// With o.LlamaBench naming a llama-bench binary, llama.cpp runs on the
// same GGUF file in the same run with as many threads, and the GGUF
// formats report the ratios to it (vs_llama_bench); without one they say
// so (llama_bench_error).
func Engine(ctx context.Context, o EngineOptions, stdout, stderr io.Writer) error {
	if o.Prompt < 1 || o.Decode < 1 || o.Repeat < 1 {
		return optionErrorf("-prompt, -decode and -repeat must be positive")
	}
	profile, closeProfile, err := createProfile(o.CPUProfile, o.Formats)
	if err != nil {
		return err
	}
	defer closeProfile()
	formats := engineFormats(demo0p6Shape())

	out := map[string]any{
		"model":   "random weights shaped like Qwen3-0.6B (28 layers, hidden 1024, 16/8 heads × 128, intermediate 3072, vocab 151936)",
		"prompt":  o.Prompt,
		"decode":  o.Decode,
		"note":    "vs_llama_bench divides by llama-bench's figures on the same GGUF file, same threads, same run (LLAMA_BENCH; make bench uses the build of scripts/llamacpp.sh)",
		"kernels": kernels.Default().Level().String(),
	}
	be := cpu.New(cpu.Options{Threads: o.Threads})
	defer be.Close()
	out["threads"] = be.Threads()
	bw := measureBandwidth(be.Threads())
	out["read_bandwidth_gb_s"] = bw
	results := map[string]*engineResult{}
	for _, f := range formats {
		if !slices.Contains(o.Formats, f.name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "bench engine: %s\n", f.name)
		r := &engineResult{}
		results[f.name] = r
		path, err := benchModel(o.CacheDir, f)
		r.Path = path
		if err == nil {
			err = runEngine(ctx, be, path, o.Prompt, o.Decode, o.Repeat, profile, r)
		}
		if err != nil {
			r.Error = err.Error()
			continue
		}
		r.BandwidthFraction = r.DecodeGBs / bw[strconv.Itoa(be.Threads())+"_threads"]
		if f.opts.Format != demo.FormatGGUF {
			continue
		}
		if o.LlamaBench == "" {
			r.LlamaBenchError = "not run: no llama-bench (set LLAMA_BENCH, or run make test-deps, which builds it)"
			continue
		}
		lb, err := llamaBench(ctx, o.LlamaBench, path, o.Prompt, o.Decode, be.Threads())
		if err != nil {
			r.LlamaBenchError = err.Error()
			continue
		}
		r.LlamaBench = lb
		r.VsLlamaBench = &engineSpeed{Prefill: r.PrefillTokS / lb.Prefill, Decode: r.DecodeTokS / lb.Decode, DecodeEmpty: r.DecodeEmptyTokS / lb.DecodeEmpty}
	}
	out["formats"] = results
	return json.NewEncoder(stdout).Encode(out)
}

// demo0p6Shape is the benchmark model's shape: Qwen3-0.6B's.
func demo0p6Shape() demo.Options {
	return demo.Options{Arch: "qwen3", Layers: 28, Hidden: 1024, Heads: 16, KVHeads: 8, HeadDim: 128,
		Intermediate: 3072, VocabFrom: filepath.Join(fixturesDir(), "tokenizers", "qwen3"), Seed: 1}
}

// engineFormats are the benchmark model's weight layouts.
func engineFormats(shape demo.Options) []engineFormat {
	return []engineFormat{
		{"bf16", shape},
		{"mlx-q4", withOpts(shape, func(o *demo.Options) { o.Quantize, o.GroupSize = 4, 64 })},
		{"gguf-q4_k_m", withOpts(shape, func(o *demo.Options) { o.Format, o.GGUFType = demo.FormatGGUF, "q4_k_m" })},
		{"gguf-q8_0", withOpts(shape, func(o *demo.Options) { o.Format, o.GGUFType = demo.FormatGGUF, "q8_0" })},
	}
}

func withOpts(o demo.Options, f func(*demo.Options)) demo.Options {
	f(&o)
	return o
}

// benchModel returns the path of the format's model in cacheDir, creating
// it if it is not there yet.
func benchModel(cacheDir string, f engineFormat) (string, error) {
	return benchModelAt(filepath.Join(cacheDir, "qwen3-0.6b-shape-"+f.name), f)
}

// benchModelAt is benchModel in directory dir.
func benchModelAt(dir string, f engineFormat) (string, error) {
	path, marker := dir, filepath.Join(dir, "config.json")
	if f.opts.Format == demo.FormatGGUF {
		path = demo.GGUFPath(dir)
		marker = path
	}
	if _, err := os.Stat(marker); err == nil {
		return path, nil
	}
	if _, err := os.Stat(filepath.Join(f.opts.VocabFrom, "tokenizer.json")); err != nil {
		return path, fmt.Errorf("the Qwen3 tokenizer fixture is missing (run `make test-deps`): %w", err)
	}
	tmp := dir + ".tmp"
	tmpPath := tmp
	if f.opts.Format == demo.FormatGGUF {
		tmpPath = demo.GGUFPath(tmp)
	}
	os.RemoveAll(tmpPath)
	if _, err := demo.Create(tmp, f.opts); err != nil {
		return path, err
	}
	runtime.GC()
	debug.FreeOSMemory()
	return path, os.Rename(tmpPath, path)
}

// runEngine loads the model, prefills a prompt in one step and decodes
// greedily, recording speeds and memory. The prefill runs repeat times
// on fresh sequences after a short warm-up step (as llama-bench warms up
// and repeats), and decode continues the last one.
// A non-nil profile receives a CPU profile of the decode steps.
func runEngine(ctx context.Context, be *cpu.Backend, path string, promptLen, decodeLen, repeat int, profile io.Writer, r *engineResult) error {
	runtime.GC()
	debug.FreeOSMemory()
	resetPeakRSS()
	start := time.Now()
	m, err := model.Load(ctx, path, be, model.Options{})
	if err != nil {
		return err
	}
	defer m.Close()
	r.LoadSeconds = time.Since(start).Seconds()
	r.WeightBytes = m.WeightBytes()
	prompt := make([]int, promptLen)
	for i := range prompt {
		prompt[i] = (i*7919 + 13) % 150000
	}
	warm, err := m.NewSequence(16)
	if err != nil {
		return err
	}
	_, err = m.Forward(ctx, []model.Input{{Seq: warm, Tokens: prompt[:min(16, promptLen)]}}, model.Range{}, nil)
	warm.Close()
	if err != nil {
		return err
	}
	var seq *model.Sequence
	var o *model.Output
	for range repeat {
		if seq != nil {
			seq.Close()
		}
		// Return the last run's KV cache to the OS first, so that peak
		// RSS counts one sequence.
		runtime.GC()
		debug.FreeOSMemory()
		if seq, err = m.NewSequence(promptLen + decodeLen); err != nil {
			return err
		}
		start = time.Now()
		if o, err = m.Forward(ctx, []model.Input{{Seq: seq, Tokens: prompt}}, model.Range{}, nil); err != nil {
			seq.Close()
			return err
		}
		r.PrefillRuns = append(r.PrefillRuns, float64(promptLen)/time.Since(start).Seconds())
	}
	defer seq.Close()
	r.PrefillTokS = slices.Sorted(slices.Values(r.PrefillRuns))[len(r.PrefillRuns)/2]
	next := argmaxLogits(o.Logits[0])
	var kvRead int64
	if profile != nil {
		if err := pprof.StartCPUProfile(profile); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	start = time.Now()
	for range decodeLen {
		_, used := seq.CacheBytes()
		kvRead += used
		if o, err = m.Forward(ctx, []model.Input{{Seq: seq, Tokens: []int{next}}}, model.Range{}, nil); err != nil {
			return err
		}
		next = argmaxLogits(o.Logits[0])
	}
	secs := time.Since(start).Seconds()
	if profile != nil {
		pprof.StopCPUProfile()
	}
	r.DecodeTokS = float64(decodeLen) / secs
	r.KVAllocatedBytes, r.KVUsedBytes = seq.CacheBytes()
	// Each decode step streams every weight once (the embedding as the LM
	// head; its one looked-up row is negligible) and the KV cache.
	r.DecodeBytesPerTok = r.WeightBytes + kvRead/int64(decodeLen)
	r.DecodeGBs = float64(r.WeightBytes*int64(decodeLen)+kvRead) / secs / 1e9
	r.PeakRSSBytes = peakRSS()

	// Decode from an empty context, the way llama-bench's tg test
	// measures it: one token, then decodeLen greedy steps.
	empty, err := m.NewSequence(decodeLen + 1)
	if err != nil {
		return err
	}
	defer empty.Close()
	if o, err = m.Forward(ctx, []model.Input{{Seq: empty, Tokens: prompt[:1]}}, model.Range{}, nil); err != nil {
		return err
	}
	next = argmaxLogits(o.Logits[0])
	start = time.Now()
	for range decodeLen {
		if o, err = m.Forward(ctx, []model.Input{{Seq: empty, Tokens: []int{next}}}, model.Range{}, nil); err != nil {
			return err
		}
		next = argmaxLogits(o.Logits[0])
	}
	r.DecodeEmptyTokS = float64(decodeLen) / time.Since(start).Seconds()
	return nil
}

func argmaxLogits(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// measureBandwidth times streaming reads of a buffer much larger than
// the caches on 1 and on n goroutines: a Go loop summing 64-bit words into
// eight accumulators, and a SIMD dot product of the buffer with itself. It
// returns the best of three passes of either, in GB/s.
func measureBandwidth(n int) map[string]float64 {
	const words = 128 << 20 // 1 GiB
	buf := make([]uint64, words)
	for i := range buf {
		buf[i] = 0x3f8000003f800000 // float32 ones
	}
	floats := unsafe.Slice((*float32)(unsafe.Pointer(&buf[0])), 2*words)
	readers := []func(lo, hi int){
		func(lo, hi int) { sumWords(buf[lo:hi]) },
		func(lo, hi int) { kernels.Dot(floats[2*lo:2*hi], floats[2*lo:2*hi]) },
	}
	res := map[string]float64{}
	for _, threads := range []int{1, n} {
		best := 0.0
		for range 3 {
			for _, read := range readers {
				start := time.Now()
				var wg sync.WaitGroup
				for t := range threads {
					wg.Add(1)
					go func() {
						defer wg.Done()
						read(t*words/threads, (t+1)*words/threads)
					}()
				}
				wg.Wait()
				best = max(best, 8*words/time.Since(start).Seconds()/1e9)
			}
		}
		res[strconv.Itoa(threads)+"_threads"] = best
	}
	return res
}

func sumWords(b []uint64) uint64 {
	var s0, s1, s2, s3, s4, s5, s6, s7 uint64
	for i := 0; i+8 <= len(b); i += 8 {
		s0, s1, s2, s3 = s0+b[i], s1+b[i+1], s2+b[i+2], s3+b[i+3]
		s4, s5, s6, s7 = s4+b[i+4], s5+b[i+5], s6+b[i+6], s7+b[i+7]
	}
	return s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7
}

// resetPeakRSS resets the kernel's high-water mark of this process.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// peakRSS is VmHWM from /proc/self/status (0 where unavailable).
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// llamaBench runs llama-bench on the same file and returns its pp and tg
// tokens/s: prefill of the prompt, decode after the prompt (tg at a
// depth of the prompt's length, -d) and decode from an empty context.
func llamaBench(ctx context.Context, bin, path string, prompt, decode, threads int) (*engineSpeed, error) {
	cmd := exec.CommandContext(ctx, bin, "-m", path, "-p", strconv.Itoa(prompt), "-n", strconv.Itoa(decode),
		"-d", "0,"+strconv.Itoa(prompt), "-t", strconv.Itoa(threads), "-r", "2", "-o", "json")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var rows []struct {
		NPrompt int     `json:"n_prompt"`
		NGen    int     `json:"n_gen"`
		NDepth  int     `json:"n_depth"`
		AvgTS   float64 `json:"avg_ts"`
	}
	if err := json.Unmarshal(out, &rows); err != nil {
		return nil, err
	}
	s := &engineSpeed{}
	for _, r := range rows {
		switch {
		case r.NPrompt > 0 && r.NGen == 0 && r.NDepth == 0:
			s.Prefill = r.AvgTS
		case r.NGen > 0 && r.NPrompt == 0 && r.NDepth == 0:
			s.DecodeEmpty = r.AvgTS
		case r.NGen > 0 && r.NPrompt == 0 && r.NDepth == prompt:
			s.Decode = r.AvgTS
		}
	}
	if s.Prefill == 0 || s.Decode == 0 || s.DecodeEmpty == 0 {
		return nil, errors.New("no pp, tg and tg-at-depth rows in its output (llama-bench too old for -d?)")
	}
	return s, nil
}

// createProfile opens the -cpuprofile file of a benchmark (nil without
// one); a profile covers one format, so formats must name only one.
func createProfile(path string, formats []string) (io.Writer, func(), error) {
	if path == "" {
		return nil, func() {}, nil
	}
	if len(formats) > 1 {
		return nil, nil, optionErrorf("-cpuprofile takes one format in -formats")
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	return f, func() { f.Close() }, nil
}
