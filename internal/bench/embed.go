package bench

import (
	"bufio"
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

	"fusion/engine/backend"
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
	Backend    string // "cpu" (fusion's CPU backend, as a node runs it) or "mlx" (libmlxc)
	Repeat     int    // timed rounds (each: a pass per batch size on each side, interleaved); medians count
	CPUProfile string // file for a CPU profile of our passes
}

// DefaultEmbedOptions are the settings `make bench` uses.
func DefaultEmbedOptions() EmbedOptions {
	return EmbedOptions{Sentences: 256, Batches: []int{1, 8, 64}, Repeat: 5, Backend: "cpu"}
}

type embedBatchResult struct {
	FusionSentencesS float64 `json:"fusion_sentences_s"`
	STSentencesS     float64 `json:"st_sentences_s,omitempty"`
	Ratio            float64 `json:"ratio,omitempty"`
	// The ratio of each round's pair of passes, sorted: its spread is
	// the noise of the machine.
	RoundRatios []float64 `json:"round_ratios,omitempty"`
}

type embedBenchResult struct {
	Model       string                       `json:"model"`
	Sentences   int                          `json:"sentences"`
	MeanTokens  float64                      `json:"mean_tokens"`
	Threads     int                          `json:"threads"`
	Backend     string                       `json:"backend"`
	Kernels     string                       `json:"kernels,omitempty"`
	Rounds      int                          `json:"rounds"`
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
// fixture) on the CPU backend, as a node runs it, against
// sentence-transformers on CPU torch with the same thread count, in the
// same run: sentences/s at each batch size (texts sorted by length and
// cut into batches, as sentence-transformers' encode does; tokenizing
// counted on both sides) and the median latency of one short sentence.
// The two sides take turns pass by pass (sentence-transformers runs in a
// Python process that waits for each command), so that the noise of a
// shared machine falls on both; after a warm-up round, the medians of
// -repeat rounds count. Ratios are ours over theirs (throughput) and
// theirs over ours (latency): above 1 is faster.
func Embed(ctx context.Context, o EmbedOptions, stdout, stderr io.Writer) error {
	if o.Sentences < 1 || o.Repeat < 1 || len(o.Batches) == 0 || slices.Min(o.Batches) < 1 || o.Threads < 0 {
		return optionErrorf("-sentences, -repeat and every -batches value must be positive, -threads not negative")
	}
	if o.Backend != "cpu" && o.Backend != "mlx" {
		return optionErrorf("-backend must be cpu or mlx, not %q", o.Backend)
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
	res := &embedBenchResult{Model: dir, Sentences: len(texts), Threads: threads, Backend: o.Backend,
		Rounds: o.Repeat, Batches: map[string]*embedBatchResult{},
		Note: "sentences/s over all sentences at each batch size (sorted by length, tokenizing included), median of the rounds, the two sides taking turns; ratio = fusion / sentence-transformers, short_p50_ratio = sentence-transformers / fusion"}
	enc := json.NewEncoder(stdout)
	var be backend.Backend
	if o.Backend == "mlx" {
		mb, err := newMLXBackend()
		if err != nil {
			res.Error = fmt.Sprintf("mlx backend: %v", err)
			return enc.Encode(res)
		}
		be = mb
	} else {
		cb := cpu.New(cpu.Options{Threads: threads})
		res.Kernels = cb.Kernels().Level().String()
		be = cb
	}
	defer be.Close()
	m, err := embed.Load(ctx, dir, be, false)
	if err != nil {
		res.Error = fmt.Sprintf("model: %v (run `make test-deps`)", err)
		return enc.Encode(res)
	}
	defer m.Close()
	tokens := 0
	for _, s := range texts {
		ids, _ := m.Tokens(s, nil)
		tokens += len(ids)
	}
	res.MeanTokens = float64(tokens) / float64(len(texts))
	ids, _ := m.Tokens(texts[0], nil)
	res.ShortTokens = len(ids)

	fmt.Fprintf(stderr, "bench embed: starting sentence-transformers\n")
	ref, err := startSTBench(ctx, dir, threads, texts)
	if err != nil {
		res.Error = err.Error() // our side is still measured
	} else {
		defer ref.close()
		res.Torch = ref.torch
	}
	stopProfile := func() {}
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		stopProfile = pprof.StopCPUProfile
		defer stopProfile()
	}

	ours := map[int][]float64{} // seconds per pass
	theirs := map[int][]float64{}
	for round := range o.Repeat + 1 { // round 0 warms up
		for _, b := range o.Batches {
			fmt.Fprintf(stderr, "bench embed: round %d, batch %d\n", round, b)
			start := time.Now()
			if err := embedAll(ctx, m, texts, b); err != nil {
				return err
			}
			s := time.Since(start).Seconds()
			var t float64
			if ref != nil {
				if t, err = ref.batch(b); err != nil {
					res.Error, ref = err.Error(), nil
				}
			}
			if round > 0 {
				ours[b] = append(ours[b], s)
				if ref != nil {
					theirs[b] = append(theirs[b], t)
				}
			}
		}
	}
	for _, b := range o.Batches {
		r := &embedBatchResult{FusionSentencesS: float64(len(texts)) / median(ours[b])}
		if len(theirs[b]) == len(ours[b]) {
			r.STSentencesS = float64(len(texts)) / median(theirs[b])
			r.Ratio = r.FusionSentencesS / r.STSentencesS
			for i := range ours[b] {
				r.RoundRatios = append(r.RoundRatios, round(theirs[b][i]/ours[b][i]))
			}
			slices.Sort(r.RoundRatios)
		}
		res.Batches[strconv.Itoa(b)] = r
	}

	// Latency of the short sentence: blocks of 10 on each side in turn,
	// the first block of each side a warm-up.
	var lat, refLat []float64
	for block := range 6 {
		for range 10 {
			start := time.Now()
			if err := embedAll(ctx, m, texts[:1], 1); err != nil {
				return err
			}
			if block > 0 {
				lat = append(lat, time.Since(start).Seconds())
			}
		}
		if ref != nil {
			t, err := ref.short(10)
			if err != nil {
				res.Error, ref = err.Error(), nil
			} else if block > 0 {
				refLat = append(refLat, t...)
			}
		}
	}
	stopProfile()
	res.FusionP50Ms = round(median(lat) * 1e3)
	if len(refLat) > 0 {
		res.STP50Ms = round(median(refLat) * 1e3)
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

// stBench is the running sentence-transformers side: a Python process
// answering one command at a time (see st_embed_bench.py).
type stBench struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr *bytes.Buffer
	tmp    string
	torch  string
}

// startSTBench starts the Python side on texts and waits until its model
// is loaded.
func startSTBench(ctx context.Context, dir string, threads int, texts []string) (_ *stBench, err error) {
	python := pythonPath()
	if _, err := os.Stat(python); err != nil {
		return nil, fmt.Errorf("reference python: %w (run `make test-deps`)", err)
	}
	tmp, err := os.MkdirTemp("", "fusion-bench-embed-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	script := filepath.Join(tmp, "st_embed_bench.py")
	if err := os.WriteFile(script, []byte(stEmbedBenchScript), 0o644); err != nil {
		return nil, err
	}
	var lines bytes.Buffer
	je := json.NewEncoder(&lines)
	je.SetEscapeHTML(false)
	for _, s := range texts {
		if err := je.Encode(s); err != nil {
			return nil, err
		}
	}
	textsPath := filepath.Join(tmp, "texts.jsonl")
	if err := os.WriteFile(textsPath, lines.Bytes(), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, python, script, dir, strconv.Itoa(threads), textsPath)
	th := strconv.Itoa(threads)
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "TOKENIZERS_PARALLELISM=false",
		"OMP_NUM_THREADS="+th, "MKL_NUM_THREADS="+th)
	st := &stBench{cmd: cmd, stderr: &bytes.Buffer{}, tmp: tmp}
	cmd.Stderr = st.stderr
	if st.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	st.out = bufio.NewScanner(out)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("sentence-transformers: %w", err)
	}
	var hello struct {
		Threads int    `json:"threads"`
		Torch   string `json:"torch"`
	}
	if err := st.read(&hello); err != nil {
		st.close()
		return nil, err
	}
	if hello.Threads != threads {
		st.close()
		return nil, fmt.Errorf("sentence-transformers ran on %d threads, not %d", hello.Threads, threads)
	}
	st.torch = hello.Torch
	return st, nil
}

// read decodes the next line of the Python side's output into v.
func (st *stBench) read(v any) error {
	if !st.out.Scan() {
		err := st.out.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("sentence-transformers: %w: %s", err, lastLines(st.stderr.String(), 5))
	}
	if err := json.Unmarshal(st.out.Bytes(), v); err != nil {
		return fmt.Errorf("sentence-transformers output: %w", err)
	}
	return nil
}

func (st *stBench) call(cmd string, v any) error {
	if _, err := io.WriteString(st.in, cmd+"\n"); err != nil {
		return fmt.Errorf("sentence-transformers: %w: %s", err, lastLines(st.stderr.String(), 5))
	}
	return st.read(v)
}

// batch times one encode of all texts at batch size b (seconds).
func (st *stBench) batch(b int) (float64, error) {
	var r struct {
		Seconds float64 `json:"seconds"`
	}
	err := st.call(fmt.Sprintf(`{"batch": %d}`, b), &r)
	return r.Seconds, err
}

// short times n encodes of the first text alone (seconds each).
func (st *stBench) short(n int) ([]float64, error) {
	var r struct {
		Seconds []float64 `json:"seconds"`
	}
	err := st.call(fmt.Sprintf(`{"short": %d}`, n), &r)
	return r.Seconds, err
}

// close ends the Python process (EOF on its stdin) and removes its files.
func (st *stBench) close() {
	st.in.Close()
	_ = st.cmd.Wait()
	os.RemoveAll(st.tmp)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
