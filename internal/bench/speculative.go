package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"fusion/engine"
	"fusion/engine/demo"
	"fusion/engine/modelfile"
	"fusion/engine/prompt"
	"fusion/engine/runner"
	"fusion/engine/sample"
)

// SpeculativeOptions are the settings of the speculative decoding
// benchmark.
type SpeculativeOptions struct {
	CacheDir    string // directory the benchmark models are created in (reused)
	Decode      int    // greedy tokens per run
	DraftTokens int    // tokens drafted per step
	// DraftLayers are the draft models made of the target's first layers
	// (each a share of acceptance set by construction).
	DraftLayers []int
	Threads     int // compute goroutines (0: all cores)
	Repeat      int // runs of every case; each reports its median
}

// DefaultSpeculativeOptions are the settings `make bench` uses.
func DefaultSpeculativeOptions() SpeculativeOptions {
	return SpeculativeOptions{CacheDir: DefaultCacheDir, Decode: 96, DraftTokens: 4, DraftLayers: []int{1, specKeep}, Repeat: 3}
}

// specShape is the target: a 6-layer model of Qwen3-0.6B's widths with
// the demo tokenizer (a small vocabulary: the layers, not the LM head,
// cost most, as in a larger model), its last layers damped (dampLayers).
func specShape() demo.Options {
	return demo.Options{Arch: "qwen3", Layers: 6, Hidden: 1024, Heads: 16, KVHeads: 8, HeadDim: 64, Intermediate: 3072, DType: "bf16", Seed: 21}
}

// The target's layers from specKeep on add specDamp times what a demo
// layer adds to the residual stream: its first specKeep layers then
// predict it well (a draft made of them is accepted often, by
// construction), and every layer still costs a full layer.
const (
	specKeep = 2
	specDamp = 0.05
)

// dampLayers scales the output projections (attention o_proj, MLP
// down_proj) of layers keep.. by f.
func dampLayers(m *demo.Model, keep int, f float32) {
	for _, t := range m.Tensors {
		var layer int
		var rest string
		if _, err := fmt.Sscanf(t.Name, "model.layers.%d.%s", &layer, &rest); err != nil || layer < keep {
			continue
		}
		if rest != "self_attn.o_proj.weight" && rest != "mlp.down_proj.weight" {
			continue
		}
		for i := range t.Data {
			t.Data[i] *= f
		}
	}
}

// specCase is one row of the benchmark.
type specCase struct {
	Name       string    `json:"name"`
	Draft      string    `json:"draft"` // "": none; "lookup": prompt lookup; else a model
	DecodeTokS float64   `json:"decode_tok_s"`
	Speedup    float64   `json:"speedup_vs_plain"`
	Drafted    int       `json:"drafted"`
	Accepted   int       `json:"accepted"`
	Acceptance float64   `json:"acceptance"`
	Runs       []float64 `json:"decode_tok_s_runs"`
	Error      string    `json:"error,omitempty"`
}

// Speculative measures single-stream greedy decode tokens/s through the
// runner without drafting, with prompt lookup on a repetitive prompt,
// with a draft that is a copy of the model (acceptance ~100%: every
// draft is what the model would say) and with drafts made of the
// model's first layers (lower acceptance, cheaper drafts), in one run.
func Speculative(ctx context.Context, o SpeculativeOptions, stdout, stderr io.Writer) error {
	if o.Decode < 8 || o.DraftTokens < 1 || o.DraftTokens > runner.MaxDraftTokens || o.Repeat < 1 {
		return optionErrorf("-decode must be at least 8, -draft-tokens in [1, %d], -repeat positive", runner.MaxDraftTokens)
	}
	shape := specShape()
	for _, n := range o.DraftLayers {
		if n < 1 || n >= shape.Layers {
			return optionErrorf("-draft-layers: each in [1, %d), got %d", shape.Layers, n)
		}
	}
	dir := filepath.Join(o.CacheDir, fmt.Sprintf("speculative-damped-%v", specDamp)) // the target depends on it
	target := filepath.Join(dir, "target")
	if err := specModels(target, shape, o.DraftLayers, stderr); err != nil {
		return err
	}
	text, err := prompt.Load(target)
	if err != nil {
		return err
	}
	cases := []specCase{{Name: "plain"}, {Name: "prompt_lookup", Draft: "lookup"}, {Name: "draft_copy", Draft: "copy"}}
	for _, n := range o.DraftLayers {
		cases = append(cases, specCase{Name: fmt.Sprintf("draft_first_%d_layers", n), Draft: fmt.Sprintf("first-%d", n)})
	}
	for rep := range o.Repeat {
		for i := range cases {
			c := &cases[i]
			fmt.Fprintf(stderr, "bench speculative: %s (run %d of %d)\n", c.Name, rep+1, o.Repeat)
			rate, u, err := specRun(ctx, dir, c.Draft, text, o)
			if err != nil {
				c.Error = err.Error()
				continue
			}
			c.Runs = append(c.Runs, rate)
			c.Drafted, c.Accepted = u.DraftedTokens, u.AcceptedTokens
		}
	}
	for i := range cases {
		c := &cases[i]
		if len(c.Runs) > 0 {
			s := slices.Sorted(slices.Values(c.Runs))
			c.DecodeTokS = s[len(s)/2]
		}
		if c.Drafted > 0 {
			c.Acceptance = float64(c.Accepted) / float64(c.Drafted)
		}
		if cases[0].DecodeTokS > 0 {
			c.Speedup = c.DecodeTokS / cases[0].DecodeTokS
		}
	}
	return json.NewEncoder(stdout).Encode(map[string]any{
		"model":  fmt.Sprintf("random weights, %d layers of Qwen3-0.6B's widths, bf16, the demo tokenizer, layers %d.. adding %.2f of a layer's output (so its first %d layers predict it); one stream, greedy", shape.Layers, specKeep, specDamp, specKeep),
		"decode": o.Decode, "draft_tokens": o.DraftTokens, "repeat": o.Repeat,
		"prompt": "a repeated 8-token phrase, 64 tokens",
		"note":   "decode_tok_s: tokens after the first over the time after the first (median of the runs); acceptance = accepted/drafted; goal: speedup >= 1.8 at acceptance >= 0.7",
		"cases":  cases,
	})
}

// specModels writes the target, a copy of it, and its first-n-layer
// drafts (the target's weight files linked, config.json cut to n layers)
// unless they exist.
func specModels(target string, shape demo.Options, layers []int, stderr io.Writer) error {
	if _, err := os.Stat(filepath.Join(target, "config.json")); err != nil {
		fmt.Fprintf(stderr, "bench speculative: creating the model\n")
		os.RemoveAll(target + ".tmp")
		m, err := demo.Build(shape)
		if err != nil {
			return err
		}
		dampLayers(m, specKeep, specDamp)
		if err := demo.Write(target+".tmp", m); err != nil {
			return err
		}
		if err := os.Rename(target+".tmp", target); err != nil {
			return err
		}
	}
	dir := filepath.Dir(target)
	copies := map[string]int{"copy": shape.Layers}
	for _, n := range layers {
		copies[fmt.Sprintf("first-%d", n)] = n
	}
	for name, n := range copies {
		if err := linkModel(target, filepath.Join(dir, name), n); err != nil {
			return fmt.Errorf("draft %s: %w", name, err)
		}
	}
	return nil
}

// linkModel makes dst a model of src's files (hard links, or copies
// across devices) with config.json's num_hidden_layers set to layers.
func linkModel(src, dst string, layers int) error {
	if _, err := os.Stat(filepath.Join(dst, "config.json")); err == nil {
		return nil
	}
	tmp := dst + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() || e.Name() == modelfile.ConfigFile {
			continue
		}
		from, to := filepath.Join(src, e.Name()), filepath.Join(tmp, e.Name())
		if err := os.Link(from, to); err != nil {
			b, rerr := os.ReadFile(from)
			if rerr != nil {
				return rerr
			}
			if err := os.WriteFile(to, b, 0o644); err != nil {
				return err
			}
		}
	}
	raw, err := os.ReadFile(filepath.Join(src, modelfile.ConfigFile))
	if err != nil {
		return err
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return err
	}
	cfg["num_hidden_layers"] = layers
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, modelfile.ConfigFile), out, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// specRun serves the target on a fresh runner (draft: "" none, "lookup",
// or a draft model's name) and times one greedy request of o.Decode
// tokens after a warm-up one.
func specRun(ctx context.Context, dir, draft string, text *prompt.Builder, o SpeculativeOptions) (float64, engine.Usage, error) {
	set := runner.ModelSettings{NumDraftTokens: o.DraftTokens}
	if draft != "" && draft != "lookup" {
		set.DraftModel = draft
	}
	r, err := runner.New(runner.Config{
		ModelsDir: dir, Preload: []string{"target"}, Threads: o.Threads,
		Models: map[string]runner.ModelSettings{"target": set},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return 0, engine.Usage{}, err
	}
	defer r.Close()
	bias := map[int]float64{}
	for _, id := range text.Tokenizer().EOS() {
		bias[id] = -100 // random weights must not stop early
	}
	phrase := text.Tokenizer().Encode(" the quick brown fox jumps over the dog", false)
	var toks []int
	for len(toks) < 64 {
		toks = append(toks, phrase...)
	}
	req := func(n int) *engine.Request {
		p := sample.DefaultParams()
		p.Temperature, p.LogitBias = 0, bias
		return &engine.Request{Model: "target", PromptTokens: toks[:64], Sampling: p, MaxTokens: n, Speculative: draft != ""}
	}
	if _, _, err := specTimes(ctx, r, req(8)); err != nil { // warm-up
		return 0, engine.Usage{}, err
	}
	ts, u, err := specTimes(ctx, r, req(o.Decode))
	if err != nil {
		return 0, u, err
	}
	span := ts[len(ts)-1].Sub(ts[0])
	if span <= 0 {
		return 0, u, fmt.Errorf("no decode time measured")
	}
	return float64(len(ts)-1) / span.Seconds(), u, nil
}

// specTimes runs req and returns when each token arrived and the final
// usage (streamTimes without the usage).
func specTimes(ctx context.Context, r *runner.Runner, req *engine.Request) ([]time.Time, engine.Usage, error) {
	ch, err := r.Generate(ctx, req)
	if err != nil {
		return nil, engine.Usage{}, err
	}
	var ts []time.Time
	for ev := range ch {
		now := time.Now()
		for range ev.Tokens {
			ts = append(ts, now)
		}
		if ev.Done {
			if ev.Err != nil {
				return nil, ev.Usage, ev.Err
			}
			if len(ts) < 2 {
				return nil, ev.Usage, fmt.Errorf("only %d tokens", len(ts))
			}
			return ts, ev.Usage, nil
		}
	}
	return nil, engine.Usage{}, ctx.Err()
}
