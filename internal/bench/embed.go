package bench

import (
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"fusion/engine/backend/cpu"
	"fusion/engine/embed"
)

//go:embed st_embed_bench.py
var stEmbedBenchScript string

// EmbedOptions are the settings of the embeddings benchmark.
type EmbedOptions struct {
	Model      string // the model directory ("": the all-MiniLM-L6-v2 fixture)
	Sentences  int    // sentences embedded at each batch size
	Batches    []int  // sentences per encoder pass
	Threads    int    // compute threads on both sides (0: all cores)
	Repeat     int    // timed passes per batch size on each side; the fastest counts
	CPUProfile string // file for a CPU profile of our passes
}

// DefaultEmbedOptions are the settings `make bench` uses.
func DefaultEmbedOptions() EmbedOptions {
	return EmbedOptions{Sentences: 256, Batches: []int{1, 8, 64}, Repeat: 3}
}

type embedBatchResult struct {
	FusionSentencesS float64 `json:"fusion_sentences_s"`
	STSentencesS     float64 `json:"st_sentences_s,omitempty"`
	Ratio            float64 `json:"ratio,omitempty"`
}

type embedBenchResult struct {
	Model       string                       `json:"model"`
	Sentences   int                          `json:"sentences"`
	MeanTokens  float64                      `json:"mean_tokens"`
	Threads     int                          `json:"threads"`
	Batches     map[string]*embedBatchResult `json:"batches"`
	ShortTokens int                          `json:"short_sentence_tokens"`
	FusionP50Ms float64                      `json:"fusion_short_p50_ms"`
	STP50Ms     float64                      `json:"st_short_p50_ms,omitempty"`
	P50Ratio    float64                      `json:"short_p50_ratio,omitempty"`
	Torch       string                       `json:"torch,omitempty"`
	Note        string                       `json:"note"`
	Error       string                       `json:"error,omitempty"`
}

// Embed measures sentence embeddings with all-MiniLM-L6-v2 (the PyPI
// fixture) on the CPU backend against sentence-transformers on CPU torch
// with the same thread count, in the same run: sentences/s at each batch
// size (texts sorted by length and cut into batches, as
// sentence-transformers' encode does; tokenizing counted on both sides) and
// the median latency of one short sentence. Ratios are ours over theirs
// (throughput) and theirs over ours (latency): above 1 is faster.
func Embed(ctx context.Context, o EmbedOptions, stdout, stderr io.Writer) error {
	if o.Sentences < 1 || o.Repeat < 1 || len(o.Batches) == 0 || slices.Min(o.Batches) < 1 || o.Threads < 0 {
		return optionErrorf("-sentences, -repeat and every -batches value must be positive, -threads not negative")
	}
	dir := o.Model
	if dir == "" {
		dir = filepath.Join(fixturesDir(), "models", "all-minilm-l6-v2")
	}
	threads := o.Threads
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	texts := embedSentences(o.Sentences)
	res := &embedBenchResult{Model: dir, Sentences: len(texts), Threads: threads, Batches: map[string]*embedBatchResult{},
		Note: "sentences/s over all sentences at each batch size (sorted by length, tokenizing included), best of -repeat; ratio = fusion / sentence-transformers, short_p50_ratio = sentence-transformers / fusion"}
	enc := json.NewEncoder(stdout)
	be := cpu.New(cpu.Options{Threads: threads})
	defer be.Close()
	m, err := embed.Load(ctx, dir, be, false)
	if err != nil {
		res.Error = fmt.Sprintf("model: %v (run `make test-deps`)", err)
		return enc.Encode(res)
	}
	defer m.Close()
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	tokens := 0
	for _, s := range texts {
		ids, _ := m.Tokens(s, nil)
		tokens += len(ids)
	}
	res.MeanTokens = float64(tokens) / float64(len(texts))
	for _, b := range o.Batches {
		fmt.Fprintf(stderr, "bench embed: fusion, batch %d\n", b)
		best := time.Duration(1<<63 - 1)
		for i := range o.Repeat + 1 {
			start := time.Now()
			if err := embedAll(ctx, m, texts, b); err != nil {
				return err
			}
			if i > 0 { // the first pass warms up
				best = min(best, time.Since(start))
			}
		}
		res.Batches[strconv.Itoa(b)] = &embedBatchResult{FusionSentencesS: float64(len(texts)) / best.Seconds()}
	}
	short := texts[0]
	ids, _ := m.Tokens(short, nil)
	res.ShortTokens = len(ids)
	var lat []time.Duration
	for i := range 60 {
		start := time.Now()
		if err := embedAll(ctx, m, []string{short}, 1); err != nil {
			return err
		}
		if i >= 10 {
			lat = append(lat, time.Since(start))
		}
	}
	slices.Sort(lat)
	res.FusionP50Ms = float64(lat[len(lat)/2].Microseconds()) / 1e3
	pprof.StopCPUProfile()

	fmt.Fprintf(stderr, "bench embed: sentence-transformers\n")
	ref, err := runSTBench(ctx, dir, threads, o.Repeat, o.Batches, texts)
	if err != nil {
		res.Error = err.Error()
		return enc.Encode(res)
	}
	res.Torch = ref.Torch
	for _, b := range o.Batches {
		r := res.Batches[strconv.Itoa(b)]
		if s := ref.Seconds[strconv.Itoa(b)]; s > 0 {
			r.STSentencesS = float64(len(texts)) / s
			r.Ratio = r.FusionSentencesS / r.STSentencesS
		}
	}
	res.STP50Ms = ref.ShortP50 * 1e3
	if res.FusionP50Ms > 0 {
		res.P50Ratio = res.STP50Ms / res.FusionP50Ms
	}
	return enc.Encode(res)
}

// embedAll embeds texts as sentence-transformers' encode does: tokenized,
// sorted by length (longest first), in batches of b.
func embedAll(ctx context.Context, m *embed.Model, texts []string, b int) error {
	seqs := make([][]int, len(texts))
	for i, s := range texts {
		seqs[i], _ = m.Tokens(s, nil)
	}
	slices.SortStableFunc(seqs, func(x, y []int) int { return cmp.Compare(len(y), len(x)) })
	for lo := 0; lo < len(seqs); lo += b {
		if _, err := m.Embed(ctx, seqs[lo:min(lo+b, len(seqs))], 0); err != nil {
			return err
		}
	}
	return nil
}

// embedSentences makes n English sentences of 4 to 40 words, the first
// one short (the latency sentence).
func embedSentences(n int) []string {
	words := strings.Fields(`the a of and to in is was for on with as by at from that this it be are
		search engine vector embedding model query document answer question retrieval dense sparse
		machine learning neural network language sentence meaning similar close far cluster index
		city river mountain music history science weather market coffee train book garden window
		quickly slowly carefully often never always today yesterday tomorrow because although while`)
	rng := rand.New(rand.NewPCG(21, 7))
	out := []string{"How do I reset my password?"}
	for len(out) < n {
		k := 4 + rng.IntN(37)
		ws := make([]string, k)
		for i := range ws {
			ws[i] = words[rng.IntN(len(words))]
		}
		out = append(out, strings.ToUpper(ws[0][:1])+strings.Join(ws, " ")[1:]+".")
	}
	return out
}

type stBenchResult struct {
	Torch    string             `json:"torch"`
	Threads  int                `json:"threads"`
	Seconds  map[string]float64 `json:"seconds"`
	ShortP50 float64            `json:"short_p50_s"`
}

func runSTBench(ctx context.Context, dir string, threads, repeat int, batches []int, texts []string) (*stBenchResult, error) {
	python := pythonPath()
	if _, err := os.Stat(python); err != nil {
		return nil, fmt.Errorf("reference python: %w (run `make test-deps`)", err)
	}
	tmp, err := os.MkdirTemp("", "fusion-bench-embed-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	script := filepath.Join(tmp, "st_embed_bench.py")
	if err := os.WriteFile(script, []byte(stEmbedBenchScript), 0o644); err != nil {
		return nil, err
	}
	var in bytes.Buffer
	je := json.NewEncoder(&in)
	je.SetEscapeHTML(false)
	for _, s := range texts {
		if err := je.Encode(s); err != nil {
			return nil, err
		}
	}
	args := []string{script, dir, strconv.Itoa(threads), strconv.Itoa(repeat)}
	for _, b := range batches {
		args = append(args, strconv.Itoa(b))
	}
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Stdin = &in
	th := strconv.Itoa(threads)
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "TOKENIZERS_PARALLELISM=false",
		"OMP_NUM_THREADS="+th, "MKL_NUM_THREADS="+th)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("sentence-transformers: %w: %s", err, lastLines(stderr.String(), 5))
	}
	var r stBenchResult
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("sentence-transformers output: %w", err)
	}
	if r.Threads != threads {
		return nil, fmt.Errorf("sentence-transformers ran on %d threads, not %d", r.Threads, threads)
	}
	return &r, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
