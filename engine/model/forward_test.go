package model

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"fusion/engine/backend/cpu"
	"fusion/engine/demo"
	"fusion/engine/demo/demotest"
)

// formats are the weight layouts every forward-pass property is checked
// on: one small model (built-in tokenizer, 4 layers, GQA 4/2) per layout
// and architecture. Llama runs on the layouts where its path differs
// (GGUF's interleaved q/k rows), Qwen3 on all, Gemma 3 and Mistral
// (safetensors only) with sliding windows, Phi-3 (its fused matrices
// split into row views) float and quantized, Mistral 3 (Llama's block,
// weights under language_model. beside a vision tower) float and
// quantized, Ministral 3 (Mistral 3's layout with queries scaled by
// position, a step every 16 positions in the demo) float, gpt-oss
// (sinks, windows of 128, biased experts) float and in mxfp4,
// DeepSeek-V3 (latent attention, sigmoid-routed and shared experts) and
// GLM-4.5 (the same mixture) float (their quantized weights go through
// the same ops; TestParityMLXFamilies checks them), the Gated DeltaNet
// hybrids Qwen3-Next and Qwen3.5-MoE (recurrent state, a gated shared
// expert) float and quantized and Qwen3.5 float, and a qwen3_moe GGUF
// (router and stacked ffn_*_exps experts) at Q8_0.
var formats = []struct {
	name  string
	opts  demo.Options
	archs []string
}{
	{"bf16", demo.Options{}, []string{"llama", "qwen3", "qwen3_moe", "phi3", "mistral3", "ministral3", "gpt_oss", "deepseek_v3", "glm4_moe",
		"qwen3_next", "qwen3_5", "qwen3_5_moe"}},
	{"mlx-q4", demo.Options{Quantize: 4, GroupSize: 32}, []string{"qwen3", "qwen3_moe", "phi3", "mistral3", "qwen3_next", "qwen3_5_moe"}},
	{"mlx-q8", demo.Options{Quantize: 8, GroupSize: 64}, []string{"qwen3"}},
	// gpt-oss as it ships: everything but the routers (affine 8-bit) in
	// mxfp4 (in place of its affine 4-bit, ~15 s a test under -race: the
	// affine experts are qwen3_moe's mlx-q4 path, the biases bf16's).
	{"mlx-mxfp4", demo.Options{QuantMode: "mxfp4"}, []string{"gpt_oss"}},
	{"gguf-f16", demo.Options{Format: demo.FormatGGUF, GGUFType: "f16"}, []string{"llama", "qwen3"}},
	{"gguf-q8_0", demo.Options{Format: demo.FormatGGUF, GGUFType: "q8_0"}, []string{"llama", "qwen3", "qwen3_moe"}},
	{"gguf-q4_0", demo.Options{Format: demo.FormatGGUF, GGUFType: "q4_0"}, []string{"qwen3"}},
	{"gguf-q4_k_m", demo.Options{Format: demo.FormatGGUF, GGUFType: "q4_k_m"}, []string{"qwen3"}},
	// Gemma 3 and Mistral with a window of 20 positions, shorter than the
	// prompts, on every other layer.
	{"bf16-window20", demo.Options{SlidingWindow: 20, SlidingPattern: 2}, []string{"gemma3_text", "mistral"}},
	{"mlx-q4-window20", demo.Options{Quantize: 4, GroupSize: 32, SlidingWindow: 20, SlidingPattern: 2}, []string{"gemma3_text", "mistral"}},
}

// smallModel writes a demo model and returns the path Load takes. The
// files are the test's own (it may edit them); each model is built once
// per test binary (demotest), as most are asked for by several tests.
func smallModel(t *testing.T, arch string, o demo.Options) string {
	t.Helper()
	o.Arch = arch
	o.Layers, o.Hidden, o.Heads, o.KVHeads, o.Intermediate = 4, 256, 4, 2, 512
	if o.Seed == 0 {
		o.Seed = 3
	}
	dir := filepath.Join(t.TempDir(), "m")
	demotest.Create(t, dir, o)
	if o.Format == demo.FormatGGUF {
		return demo.GGUFPath(dir)
	}
	return dir
}

// smallMoE is smallModel for a GGUF qwen3_moe kept cheap to quantize
// under -race: 2 layers, experts of 256 (whole K-quant blocks, so a
// q4_k_m's ffn_down_exps are Q6_K).
func smallMoE(t *testing.T, o demo.Options) string {
	t.Helper()
	o.Arch, o.Layers, o.Hidden, o.Heads, o.KVHeads, o.Intermediate, o.MoEIntermediate = "qwen3_moe", 2, 256, 4, 2, 256, 256
	if o.Seed == 0 {
		o.Seed = 3
	}
	dir := filepath.Join(t.TempDir(), "m")
	demotest.Create(t, dir, o)
	return demo.GGUFPath(dir)
}

func load(t *testing.T, be *cpu.Backend, path string, layers Range) *Model {
	t.Helper()
	m, err := Load(context.Background(), path, be, Options{Layers: layers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func newSeq(t *testing.T, m *Model) *Sequence {
	t.Helper()
	s, err := m.NewSequence(1024)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func forward(t *testing.T, m *Model, in []Input, layers Range, h *Hidden) *Output {
	t.Helper()
	out, err := m.Forward(context.Background(), in, layers, h)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tokens returns n deterministic token ids below 600 (the demo
// tokenizer's vocabulary is 640 rows).
func tokens(seed, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (seed*131 + i*71 + i*i*7) % 600
	}
	return out
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: value %d is %v, want %v (bit-identical)", what, i, got[i], want[i])
		}
	}
}

// Running layers [0, k) then [k, L), handing the hidden state over, gives
// bit-identical logits to [0, L): on one model and one sequence, and on
// two models that each load only their stage's layers (as two nodes do).
func TestLayerRanges(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	steps := [][]int{tokens(1, 37), {5}, {77}, tokens(2, 9)}
	for _, f := range formats {
		for _, arch := range f.archs {
			t.Run(f.name+"/"+arch, func(t *testing.T) {
				path := smallModel(t, arch, f.opts)
				full := load(t, be, path, Range{})
				L := full.Config.NumHiddenLayers
				ref := newSeq(t, full)
				var want [][]float32
				for _, toks := range steps {
					want = append(want, forward(t, full, []Input{{Seq: ref, Tokens: toks, AllLogits: true}}, Range{}, nil).Logits[0])
				}
				for k := 1; k < L; k++ {
					// One model, one sequence, two calls per step.
					seq := newSeq(t, full)
					// Two stage models, a sequence on each.
					first, second := load(t, be, path, Range{0, k}), load(t, be, path, Range{k, L})
					s1, s2 := newSeq(t, first), newSeq(t, second)
					for i, toks := range steps {
						h := forward(t, full, []Input{{Seq: seq, Tokens: toks}}, Range{0, k}, nil).Hidden
						got := forward(t, full, []Input{{Seq: seq, Len: len(toks), AllLogits: true}}, Range{k, L}, h).Logits[0]
						sameBits(t, fmt.Sprintf("k=%d step %d, one model", k, i), got, want[i])

						h = forward(t, first, []Input{{Seq: s1, Tokens: toks}}, Range{}, nil).Hidden
						got = forward(t, second, []Input{{Seq: s2, Len: len(toks), AllLogits: true}}, Range{}, h).Logits[0]
						sameBits(t, fmt.Sprintf("k=%d step %d, two stages", k, i), got, want[i])
					}
				}
			})
		}
	}
}

// A batch of three sequences at different positions, one decoding and two
// prefilling chunks of different lengths, gives bit-identical logits for
// every row to running each sequence alone; then again for decode steps
// of all three together.
func TestBatchingMatchesAlone(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for _, f := range formats {
		for _, arch := range f.archs {
			t.Run(f.name+"/"+arch, func(t *testing.T) {
				checkBatchingMatchesAlone(t, load(t, be, smallModel(t, arch, f.opts), Range{}))
			})
		}
	}
}

// checkBatchingMatchesAlone is TestBatchingMatchesAlone on model m.
func checkBatchingMatchesAlone(t *testing.T, m *Model) {
	t.Helper()
	history := [][]int{tokens(3, 300), tokens(4, 10), nil}
	next := [][]int{{9}, tokens(5, 25), tokens(6, 7)}
	alone := make([]*Sequence, 3)
	batched := make([]*Sequence, 3)
	for i := range 3 {
		alone[i], batched[i] = newSeq(t, m), newSeq(t, m)
		if history[i] != nil {
			forward(t, m, []Input{{Seq: alone[i], Tokens: history[i]}}, Range{}, nil)
			forward(t, m, []Input{{Seq: batched[i], Tokens: history[i]}}, Range{}, nil)
		}
	}
	for step := range 3 {
		var in []Input
		var want [][]float32
		for i := range 3 {
			toks := next[i]
			if step > 0 {
				toks = []int{(step*17 + i*5) % 600}
			}
			want = append(want, forward(t, m, []Input{{Seq: alone[i], Tokens: toks, AllLogits: true}}, Range{}, nil).Logits[0])
			in = append(in, Input{Seq: batched[i], Tokens: toks, AllLogits: true})
		}
		got := forward(t, m, in, Range{}, nil).Logits
		for i := range 3 {
			sameBits(t, fmt.Sprintf("step %d, sequence %d", step, i), got[i], want[i])
		}
	}
}

// Prefill in chunks (across a KV block boundary) gives bit-identical
// logits to one prefill: every row's products are the same ones.
func TestChunkedPrefill(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	m := load(t, be, smallModel(t, "qwen3", demo.Options{}), Range{})
	prompt := tokens(8, 300)
	one := newSeq(t, m)
	want := forward(t, m, []Input{{Seq: one, Tokens: prompt, AllLogits: true}}, Range{}, nil).Logits[0]
	chunked := newSeq(t, m)
	var got []float32
	for _, c := range [][2]int{{0, 64}, {64, 65}, {65, 260}, {260, 300}} {
		got = append(got, forward(t, m, []Input{{Seq: chunked, Tokens: prompt[c[0]:c[1]], AllLogits: true}}, Range{}, nil).Logits[0]...)
	}
	sameBits(t, "chunked prefill", got, want)
}

// A GGUF model matches its own weights dequantized to float32 within the
// error of the kernels' activation quantization. The GGUF kernels (as
// llama.cpp's) multiply the weights' integer codes by the activations
// quantized to 8 bits per block of 32, which perturbs every product by
// about 0.5% of its input's scale; the dequantized run is exact f32. The
// demo models' logits all come through those products (RMS ~4, attention
// that picks a few positions, so score errors move attention weights), and
// the fast path moves them (centered: softmax ignores a common shift) by
// 1.5-2.5% relative RMS, the log-probabilities of the 8 likeliest tokens by
// up to ~0.6. So the fast path is held to a
// relative RMS error of the logits and a bound on those log-probabilities,
// and must give the same greedy token wherever the float run's top-2 gap
// exceeds 2 nats. With Options.ExactActivations (f32 activations, weights
// dequantized on the fly) the model must match within 1e-2 in
// log-probability. (An F16 GGUF, which has no activation quantization,
// matches its dequantized run exactly; see TestGGUFMatchesSafetensors for
// the float layouts.) A qwen3_moe GGUF (ffn_*_exps in Q8_0, or Q4_K with
// ffn_down_exps in Q6_K) is held to the same bounds, but its fast path
// runs with every expert chosen: with the top 2 the activations' rounding
// flips some tokens' expert choices, a discontinuity that moved the
// logits by ~17% relative RMS with 2 of 8 experts (it would in llama.cpp
// too), which says nothing about the weights. The exact path keeps the
// top 2 of 4.
func TestGGUFMatchesDequantized(t *testing.T) {
	q := cpu.New(cpu.Options{})
	defer q.Close()
	exact := cpu.New(cpu.Options{ExactActivations: true})
	defer exact.Close()
	f32 := cpu.New(cpu.Options{Dequantize: true})
	defer f32.Close()
	for _, tc := range []struct {
		arch, typ string
		tol       float64 // fast path: relative RMS error of the logits
	}{
		{"llama", "q8_0", 2.5e-2},
		{"qwen3", "q8_0", 2.5e-2},
		{"llama", "q4_0", 2.5e-2},
		{"qwen3", "q4_k_m", 2.5e-2},
		{"qwen3_moe", "q8_0", 2.5e-2},
		{"qwen3_moe", "q4_k_m", 2.5e-2},
	} {
		for _, mode := range []struct {
			name  string
			be    *cpu.Backend
			tol   float64 // relative RMS logit error
			maxLP float64 // max |Δ logprob| over the top 8, 0: unchecked
		}{
			{"fast", q, tc.tol, 0.75},
			{"exact", exact, 1e-3, 1e-2},
		} {
			t.Run(tc.arch+"/"+tc.typ+"/"+mode.name, func(t *testing.T) {
				o := demo.Options{Format: demo.FormatGGUF, GGUFType: tc.typ}
				var path string
				if tc.arch == "qwen3_moe" {
					o.Experts, o.ExpertsPerTok = 4, 2
					if mode.be == q {
						o.Experts = 2 // both chosen
					}
					path = smallMoE(t, o)
				} else {
					path = smallModel(t, tc.arch, o)
				}
				a, b := load(t, mode.be, path, Range{}), load(t, f32, path, Range{})
				if b.WeightBytes() <= a.WeightBytes() {
					t.Errorf("dequantized weights take %d bytes, quantized %d", b.WeightBytes(), a.WeightBytes())
				}
				sa, sb := newSeq(t, a), newSeq(t, b)
				var maxLP, maxRel float64
				for i, in := range [][]int{tokens(9, 100), {5}, {77}, {300}, {12}, {599}, {41}, {8}} {
					ga := forward(t, a, []Input{{Seq: sa, Tokens: in}}, Range{}, nil).Logits[0]
					gb := forward(t, b, []Input{{Seq: sb, Tokens: in}}, Range{}, nil).Logits[0]
					// Centered: softmax ignores a shift shared by all
					// logits (the demo's rows share a large one).
					ma, mb := mean32(ga), mean32(gb)
					var num, den float64
					for j := range ga {
						d := (float64(ga[j]) - ma) - (float64(gb[j]) - mb)
						c := float64(gb[j]) - mb
						num, den = num+d*d, den+c*c
					}
					maxRel = max(maxRel, math.Sqrt(num/den))
					la, lb := logSoftmax(ga), logSoftmax(gb)
					top := topK(lb, 8)
					for _, id := range top {
						maxLP = max(maxLP, math.Abs(la[id]-lb[id]))
					}
					if lb[top[0]]-lb[top[1]] > 2 && argmax(la) != top[0] {
						t.Errorf("step %d: greedy token %d, float run %d (gap %.2f)", i, argmax(la), top[0], lb[top[0]]-lb[top[1]])
					}
				}
				t.Logf("8 steps: relative RMS logit error %.2e, max |Δ logprob| over the top 8 %.2e", maxRel, maxLP)
				if maxRel > mode.tol {
					t.Errorf("relative RMS logit error %.2e > %.1e", maxRel, mode.tol)
				}
				if mode.maxLP > 0 && maxLP > mode.maxLP {
					t.Errorf("max |Δ logprob| %.2e > %.1e", maxLP, mode.maxLP)
				}
			})
		}
	}
}

func mean32(xs []float32) float64 {
	var s float64
	for _, x := range xs {
		s += float64(x)
	}
	return s / float64(len(xs))
}

// The same weights as safetensors and as GGUF (F32/BF16: no rounding
// between them) give the same logits within float32 summation-order
// noise: GGUF names, shapes, the llama Q/K row interleave (handled by
// rotating adjacent pairs), tied embeddings and (qwen3_moe) the router
// and the stacked ffn_*_exps experts all line up.
func TestGGUFMatchesSafetensors(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for _, tc := range []struct {
		arch, dtype string
		untied      bool
	}{
		{"llama", "bf16", false}, {"llama", "bf16", true},
		{"qwen3", "bf16", false}, {"qwen3", "bf16", true},
		{"qwen3_moe", "bf16", false}, {"qwen3_moe", "f32", true},
	} {
		arch, untied := tc.arch, tc.untied
		t.Run(fmt.Sprintf("%s/%s/untied=%v", arch, tc.dtype, untied), func(t *testing.T) {
			o := demo.Options{Untied: untied, DType: tc.dtype}
			st := smallModel(t, arch, o)
			if arch == "llama" {
				// The demo GGUF carries no rope scaling; drop it here too.
				if err := setRopeScaling(st, nil); err != nil {
					t.Fatal(err)
				}
			}
			o.Format, o.GGUFType = demo.FormatGGUF, tc.dtype
			gg := smallModel(t, arch, o)
			a, b := load(t, be, st, Range{}), load(t, be, gg, Range{})
			sa, sb := newSeq(t, a), newSeq(t, b)
			for i, in := range [][]int{tokens(10, 60), {3}, {400}} {
				la := forward(t, a, []Input{{Seq: sa, Tokens: in, AllLogits: true}}, Range{}, nil).Logits[0]
				lb := forward(t, b, []Input{{Seq: sb, Tokens: in, AllLogits: true}}, Range{}, nil).Logits[0]
				var d float64
				for j := range la {
					d = max(d, math.Abs(float64(la[j]-lb[j]))/max(1, math.Abs(float64(la[j]))))
				}
				if d > 1e-4 {
					t.Errorf("step %d: logits differ by %.2e (relative)", i, d)
				}
			}
		})
	}
}

func topK(x []float64, k int) []int {
	idx := make([]int, len(x))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		switch {
		case x[a] > x[b]:
			return -1
		case x[a] < x[b]:
			return 1
		}
		return 0
	})
	return idx[:k]
}
