package demo_test

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/demo"
	"fusion/engine/runner"
	"fusion/engine/sample"
	"fusion/internal/testenv"
)

// These tests run demo models through the real engine (the runner, the CPU
// backend, the chat template and tokenizer) and check how they behave as
// language models: what tests built on them can rely on.

// generation is one answer with the statistics of its steps.
type generation struct {
	tokens []int
	text   string
	finish engine.FinishReason
	stop   string
	top1   []float64 // probability of the most likely token, per step
	gap    []float64 // top-1 minus top-2 log-probability, per step
}

func generate(t *testing.T, r *runner.Runner, model, prompt string, temperature float64, seed int64, maxTokens int) generation {
	t.Helper()
	p := sample.DefaultParams()
	p.Temperature, p.Seed = temperature, &seed
	p.Logprobs, p.TopLogprobs = true, 2
	ch, err := r.Generate(context.Background(), &engine.Request{
		Model:     model,
		Messages:  []*chattemplate.Object{chattemplate.NewObject("role", "user", "content", prompt)},
		Sampling:  p,
		MaxTokens: maxTokens,
	})
	if err != nil {
		t.Fatal(err)
	}
	var g generation
	for ev := range ch {
		if ev.Err != nil {
			t.Fatal(ev.Err)
		}
		g.text += ev.Reasoning + ev.Text
		for i, tok := range ev.Tokens {
			g.tokens = append(g.tokens, tok.ID)
			if top := ev.TopLogprobs[i]; len(top) == 2 {
				g.top1 = append(g.top1, math.Exp(top[0].Logprob))
				g.gap = append(g.gap, top[0].Logprob-top[1].Logprob)
			}
		}
		if ev.Done {
			g.finish, g.stop = ev.FinishReason, ev.StopSequence
		}
	}
	return g
}

// newRunner writes each model of opts under its name and serves them.
func newRunner(t *testing.T, opts map[string]demo.Options) *runner.Runner {
	t.Helper()
	dir := t.TempDir()
	for name, o := range opts {
		if _, err := demo.Create(filepath.Join(dir, name), o); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	r, err := runner.New(runner.Config{ModelsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

var spreadPrompts = []string{"Hello!", "Write a function that adds two numbers.", "What is the capital of France?"}

// TestOutputsVary: in every on-disk format, a demo model's greedy answers
// walk through many different tokens, its next-token distributions are
// neither one-hot nor flat, and sampling at temperature 1 depends on the
// seed. (Demo weights used to saturate: top-1 probability 1, top-1/top-2
// gaps of 10 to 100 nats, the same token at every step.)
func TestOutputsVary(t *testing.T) {
	models := map[string]demo.Options{
		"qwen3-bf16":     {Seed: 1},
		"qwen3-untied":   {Untied: true, Seed: 2},
		"llama-f16":      {Arch: "llama", DType: "f16", Seed: 3},
		"llama-f32-big":  {Arch: "llama", DType: "f32", Layers: 4, Hidden: 256, Heads: 8, KVHeads: 2, Intermediate: 512, Seed: 4},
		"qwen3-mlx4":     {Quantize: 4, GroupSize: 32, Seed: 5},
		"llama-mlx8":     {Arch: "llama", Quantize: 8, GroupSize: 64, Seed: 6},
		"gguf-f16":       {Format: demo.FormatGGUF, GGUFType: "f16", Seed: 7},
		"gguf-q8_0":      {Arch: "llama", Format: demo.FormatGGUF, GGUFType: "q8_0", Seed: 8},
		"gguf-q4_0":      {Format: demo.FormatGGUF, GGUFType: "q4_0", Seed: 9},
		"gguf-q4_k_m":    {Arch: "llama", Format: demo.FormatGGUF, GGUFType: "q4_k_m", Hidden: 256, Heads: 4, KVHeads: 2, Intermediate: 512, Seed: 10},
		"gguf-q6_k":      {Format: demo.FormatGGUF, GGUFType: "q6_k", Hidden: 256, Heads: 4, KVHeads: 2, Intermediate: 512, Seed: 11},
		"stop-after":     {StopAfter: 200, Seed: 12},
		"qwen3_moe":      {Arch: "qwen3_moe", Seed: 14},
		"qwen3_moe-mlx4": {Arch: "qwen3_moe", Quantize: 4, GroupSize: 64, Seed: 15},
		"gemma3-bf16":    {Arch: "gemma3_text", SlidingWindow: 16, SlidingPattern: 2, Layers: 4, Seed: 14},
		"gemma3-mlx4":    {Arch: "gemma3_text", Quantize: 4, GroupSize: 32, SlidingWindow: 16, SlidingPattern: 3, Layers: 3, Seed: 15},
	}
	r := newRunner(t, models)
	names := make([]string, 0, len(models))
	for n := range models {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) { checkSpread(t, r, name) })
	}
}

// TestOutputsVaryQwen3Vocab: the same with Qwen3's real 151,936-token
// vocabulary.
func TestOutputsVaryQwen3Vocab(t *testing.T) {
	r := newRunner(t, map[string]demo.Options{"m": {VocabFrom: testenv.TokenizerDir(t, "qwen3"), Seed: 13}})
	checkSpread(t, r, "m")
}

// TestOutputsVaryGemma3Vocab: a Gemma 3 demo with the real Gemma 3
// tokenizer (SentencePiece-style, 262,208 rows) and chat template, its
// local layers' window shorter than the answers, through the runner.
func TestOutputsVaryGemma3Vocab(t *testing.T) {
	r := newRunner(t, map[string]demo.Options{"m": {Arch: "gemma3_text", VocabFrom: testenv.TokenizerDir(t, "gemma3"),
		SlidingWindow: 24, SlidingPattern: 2, Seed: 16}})
	checkSpread(t, r, "m")
}

// checkSpread runs greedy and sampled answers of model and checks their
// spread.
func checkSpread(t *testing.T, r *runner.Runner, name string) {
	t.Helper()
	const steps = 64
	var top1, gap []float64
	for _, prompt := range spreadPrompts {
		g := generate(t, r, name, prompt, 0, 0, steps)
		if len(g.tokens) != steps || len(g.top1) != steps {
			t.Fatalf("%q: %d tokens (%s), %d with top logprobs; want %d", prompt, len(g.tokens), g.finish, len(g.top1), steps)
		}
		distinct := map[int]bool{}
		for _, id := range g.tokens {
			distinct[id] = true
		}
		if len(distinct) < steps/4 {
			t.Errorf("%q: %d distinct tokens in %d greedy steps, want at least %d: %q", prompt, len(distinct), steps, steps/4, g.text)
		}
		top1, gap = append(top1, g.top1...), append(gap, g.gap...)
	}
	// A flat distribution is as useless as a one-hot one: the likeliest
	// token holds a fair share, sometimes most, never all of the
	// probability.
	if m := mean(top1); m < 0.15 || m > 0.7 {
		t.Errorf("mean top-1 probability %.3f, want 0.15..0.7", m)
	}
	if m := slices.Max(top1); m > 0.999 {
		t.Errorf("max top-1 probability %.5f, want < 0.999", m)
	}
	if n := len(slices.DeleteFunc(slices.Clone(top1), func(p float64) bool { return p >= 0.5 })); n < len(top1)/3 {
		t.Errorf("%d of %d steps have a top-1 probability under 0.5, want at least a third", n, len(top1))
	}
	if m := mean(gap); m > 2.5 {
		t.Errorf("mean top-1/top-2 gap %.2f nats, want <= 2.5", m)
	}
	if m := slices.Max(gap); m > 8 {
		t.Errorf("max top-1/top-2 gap %.2f nats, want <= 8", m)
	}
	// Sampling at temperature 1 is random: two seeds differ, one seed
	// repeats itself.
	a := generate(t, r, name, spreadPrompts[0], 1, 1, 32)
	b := generate(t, r, name, spreadPrompts[0], 1, 2, 32)
	again := generate(t, r, name, spreadPrompts[0], 1, 1, 32)
	if slices.Equal(a.tokens, b.tokens) {
		t.Errorf("seeds 1 and 2 sampled the same answer %q", a.text)
	}
	if !slices.Equal(a.tokens, again.tokens) {
		t.Errorf("seed 1 sampled %q, then %q", a.text, again.text)
	}
	t.Logf("top-1 mean %.3f max %.3f, gap mean %.2f max %.2f", mean(top1), slices.Max(top1), mean(gap), slices.Max(gap))
}

// stopPrompts are what a user of `make run` might type, short and long.
var stopPrompts = []string{
	"Hello!", "hi", "2+2?", "What is the capital of France?", "Explain attention.",
	"Write a function that adds two numbers.",
	"Why is the sky blue? Answer in one sentence please, I am in a hurry.",
	"Tell me a story about a dog and a fox who meet in a forest and talk about the weather for a long time.",
}

// TestStopAfter: a model built with StopAfter 40 ends every answer with its
// end token, greedy or sampled, within 100 tokens and at varied lengths,
// in float, MLX-quantized and GGUF form; without StopAfter the same
// prompts run to max_tokens.
func TestStopAfter(t *testing.T) {
	const stopAfter, limit = 40, 100
	models := map[string]demo.Options{
		"qwen3":       {StopAfter: stopAfter, Seed: 1},
		"llama":       {Arch: "llama", StopAfter: stopAfter, Seed: 2},
		"untied":      {StopAfter: stopAfter, Untied: true, Seed: 3},
		"mlx4":        {StopAfter: stopAfter, Quantize: 4, GroupSize: 32, Seed: 4},
		"gguf-q4_k_m": {StopAfter: stopAfter, Format: demo.FormatGGUF, GGUFType: "q4_k_m", Seed: 5},
		"never":       {Seed: 1},
	}
	r := newRunner(t, models)
	for _, name := range []string{"qwen3", "llama", "untied", "mlx4", "gguf-q4_k_m"} {
		t.Run(name, func(t *testing.T) {
			lengths := map[int]bool{}
			var all []int
			for i, prompt := range stopPrompts {
				for _, temp := range []float64{0, 1} {
					g := generate(t, r, name, prompt, temp, int64(i), limit)
					if g.finish != engine.FinishStop || g.stop != "" {
						t.Errorf("%q at temperature %v: finish %q (stop sequence %q) after %d tokens, want the end token within %d",
							prompt, temp, g.finish, g.stop, len(g.tokens), limit)
					}
					if len(g.tokens) < 4 {
						t.Errorf("%q at temperature %v: ended after %d tokens", prompt, temp, len(g.tokens))
					}
					lengths[len(g.tokens)] = true
					all = append(all, len(g.tokens))
				}
			}
			if len(lengths) < 4 {
				t.Errorf("answer lengths %v: want at least 4 different ones", all)
			}
			t.Logf("lengths %v", all)
		})
	}
	t.Run("never", func(t *testing.T) {
		for i, prompt := range stopPrompts {
			if g := generate(t, r, "never", prompt, 1, int64(i), limit); g.finish != engine.FinishLength || len(g.tokens) != limit {
				t.Errorf("%q: finish %q after %d tokens, want length after %d", prompt, g.finish, len(g.tokens), limit)
			}
		}
	})
}

func TestStopAfterOptions(t *testing.T) {
	tests := []struct {
		opts demo.Options
		want string
	}{
		{demo.Options{StopAfter: -1}, "outside 0..256"},
		{demo.Options{StopAfter: demo.MaxStopAfter + 1}, "outside 0..256"},
		{demo.Options{StopAfter: 40, Hidden: 8, Heads: 4, KVHeads: 2}, "no rotary frequency"}, // head_dim 2: no pair besides the sink
	}
	for _, tc := range tests {
		_, err := demo.Build(tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Build(%+v) = %v, want an error with %q", tc.opts, err, tc.want)
		}
	}
	for _, n := range []int{10, 20, 40, 64, 100, 200, demo.MaxStopAfter} {
		if _, err := demo.Build(demo.Options{StopAfter: n}); err != nil {
			t.Errorf("StopAfter %d: %v", n, err)
		}
	}
}
