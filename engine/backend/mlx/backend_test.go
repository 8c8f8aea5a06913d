//go:build cgo

package mlx

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu"
	"fusion/engine/demo"
	"fusion/engine/model"
	"fusion/engine/tensor"
)

// backendFormats are the weight layouts the backend is checked on, each
// a small demo model (4 layers, hidden 256, GQA 4/2).
var backendFormats = []struct {
	name string
	opts demo.Options
	arch string
}{
	{"bf16-qwen3", demo.Options{}, "qwen3"},
	{"bf16-llama", demo.Options{}, "llama"},
	{"f32-qwen3", demo.Options{DType: "f32"}, "qwen3"},
	{"mlx-q4-qwen3", demo.Options{Quantize: 4, GroupSize: 32}, "qwen3"},
	{"bf16-qwen3_moe", demo.Options{}, "qwen3_moe"},
	{"mlx-q4-qwen3_moe", demo.Options{Quantize: 4, GroupSize: 32}, "qwen3_moe"},
	{"mlx-q8-qwen3", demo.Options{Quantize: 8, GroupSize: 64}, "qwen3"},
	{"gguf-q8_0-llama", demo.Options{Format: demo.FormatGGUF, GGUFType: "q8_0"}, "llama"},
	{"gguf-q4_0-qwen3", demo.Options{Format: demo.FormatGGUF, GGUFType: "q4_0"}, "qwen3"},
	{"gguf-q4_k_m-qwen3", demo.Options{Format: demo.FormatGGUF, GGUFType: "q4_k_m"}, "qwen3"},
	// Gemma 3: local layers with a 40-position window, under the prompt.
	{"bf16-gemma3", demo.Options{SlidingWindow: 40, SlidingPattern: 2}, "gemma3_text"},
	{"mlx-q4-gemma3", demo.Options{Quantize: 4, GroupSize: 32, SlidingWindow: 40, SlidingPattern: 2}, "gemma3_text"},
	// Phi-3's fused matrices as row views; gpt-oss's sinks, 40-position
	// windows and biased experts.
	{"bf16-phi3", demo.Options{}, "phi3"},
	{"bf16-gpt_oss", demo.Options{SlidingWindow: 40}, "gpt_oss"},
	{"mlx-q4-gpt_oss", demo.Options{Quantize: 4, GroupSize: 32, SlidingWindow: 40}, "gpt_oss"},
	// DeepSeek-V3's latent attention (per-head projections, one latent KV
	// head) and sigmoid-routed experts with a shared one.
	{"bf16-deepseek_v3", demo.Options{}, "deepseek_v3"},
	{"mlx-q4-deepseek_v3", demo.Options{Quantize: 4, GroupSize: 32}, "deepseek_v3"},
	{"bf16-glm4_moe", demo.Options{}, "glm4_moe"},
	// Qwen3-Next: Gated DeltaNet layers (convolution and recurrent state
	// per sequence) around gated attention, a mixture with a shared expert
	// (bf16 only: its per-token recurrence makes a 300-token prefill a
	// large graph, ~15 s under -race; 4-bit goes through the same ops).
	{"bf16-qwen3_next", demo.Options{}, "qwen3_next"},
	// llama.cpp's qwen3moe: the router and the stacked ffn_*_exps experts
	// cut into per-expert Q8_0 weights.
	{"gguf-q8_0-qwen3_moe", demo.Options{Format: demo.FormatGGUF, GGUFType: "q8_0"}, "qwen3_moe"},
	// llama.cpp's Q3_K_M mix: Q3_K, Q4_K, Q5_K and Q6_K matrices side by
	// side, dequantized at load.
	{"gguf-q3_k_m-qwen3", demo.Options{Format: demo.FormatGGUF, GGUFType: "q3_k_m"}, "qwen3"},
	// llama.cpp's gpt-oss: ggml MXFP4 experts, run as MLX's mxfp4.
	{"gguf-mxfp4-gpt_oss", demo.Options{Format: demo.FormatGGUF, DType: "f32", SlidingWindow: 40}, "gpt_oss"},
}

func demoModel(t *testing.T, arch string, o demo.Options) string {
	t.Helper()
	o.Arch = arch
	o.Layers, o.Hidden, o.Heads, o.KVHeads, o.Intermediate = 4, 256, 4, 2, 512
	o.Seed = 3
	dir := filepath.Join(t.TempDir(), "m")
	if _, err := demo.Create(dir, o); err != nil {
		t.Fatal(err)
	}
	if o.Format == demo.FormatGGUF {
		return demo.GGUFPath(dir)
	}
	return dir
}

func loadModel(t *testing.T, be backend.Backend, path string, layers model.Range) *model.Model {
	t.Helper()
	m, err := model.Load(context.Background(), path, be, model.Options{Layers: layers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// loadPair loads the model at path on two backends, each with a sequence.
func loadPair(t *testing.T, a, b backend.Backend, path string) (ma, mb *model.Model, sa, sb *model.Sequence) {
	t.Helper()
	ma, mb = loadModel(t, a, path, model.Range{}), loadModel(t, b, path, model.Range{})
	return ma, mb, newSeq(t, ma), newSeq(t, mb)
}

func newSeq(t *testing.T, m *model.Model) *model.Sequence {
	t.Helper()
	s, err := m.NewSequence(1024)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func fwd(t *testing.T, m *model.Model, in []model.Input, layers model.Range, h *model.Hidden) *model.Output {
	t.Helper()
	out, err := m.Forward(context.Background(), in, layers, h)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// promptTokens returns n deterministic token ids below 600.
func promptTokens(seed, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (seed*131 + i*71 + i*i*7) % 600
	}
	return out
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// scaleOf is max(1, max |b|), the logits' scale.
func scaleOf(b []float32) float64 {
	scale := 1.0
	for _, v := range b {
		scale = max(scale, math.Abs(float64(v)))
	}
	return scale
}

// topGap is the difference between the two largest values of v.
func topGap(v []float32) float64 {
	first, second := math.Inf(-1), math.Inf(-1)
	for _, x := range v {
		switch f := float64(x); {
		case f > first:
			first, second = f, first
		case f > second:
			second = f
		}
	}
	return first - second
}

// maxDiff is max |a − b| over max(1, max |b|): the error relative to the
// logits' scale.
func maxDiff(a, b []float32) float64 {
	scale, d := 1.0, 0.0
	for i := range b {
		scale = max(scale, math.Abs(float64(b[i])))
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d / scale
}

func testBackend(t *testing.T) {
	be, err := New(Options{MemoryLimit: 3 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	fb, err := New(Options{Float32: true})
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	// The limit is MLX's now: setting it again returns it.
	if mem, err := be.Runtime().SetMemoryLimit(context.Background(), 3<<30); err != nil || mem != 3<<30 {
		t.Errorf("memory limit after New: %d (%v), want %d", mem, err, 3<<30)
	}
	if _, err := New(Options{CacheLimit: -1}); err == nil {
		t.Error("a negative cache limit was accepted")
	}
	// The CPU reference runs GGUF products on float32 activations: by
	// default it quantizes them to 8 bits per block (llama.cpp's scheme),
	// which differs from MLX's product of the dequantized weights by more
	// than summation order (5e-3 of the logits' scale here).
	cb := cpu.New(cpu.Options{ExactActivations: true})
	defer cb.Close()
	t.Run("ParityWithCPU", func(t *testing.T) { testParityWithCPU(t, fb, cb, parityTol) })
	t.Run("NativeVsCPU", func(t *testing.T) { testParityWithCPU(t, be, cb, nativeTol) })
	t.Run("NativeTypes", func(t *testing.T) { testNativeTypes(t, be, fb) })
	t.Run("Gemma4", func(t *testing.T) { testGemma4(t, fb, cb, parityTol) })
	t.Run("Gemma4Native", func(t *testing.T) { testGemma4(t, be, cb, nativeTol) })
	// Float32 mode differs from native mode only by its casts: one bf16
	// model checks it, and keeps make test shorter.
	for _, mode := range []struct {
		name    string
		be      *Backend
		formats int
	}{{"Native", be, 6}, {"Float32", fb, 1}} {
		t.Run("BatchedVsAlone/"+mode.name, func(t *testing.T) { testBatchedVsAlone(t, mode.be, mode.formats) })
		t.Run("LayerRanges/"+mode.name, func(t *testing.T) { testLayerRanges(t, mode.be, mode.formats) })
		t.Run("KVExportImport/"+mode.name, func(t *testing.T) { testKVExportImport(t, mode.be) })
	}
	t.Run("StepMemory", func(t *testing.T) { testStepMemory(t, be) })
	t.Run("ModelRelease", func(t *testing.T) { testModelRelease(t, be) })
	t.Run("StepError", func(t *testing.T) { testStepError(t, be) })
}

// parityTol bounds max |Δ logit| / max |logit| between the MLX and CPU
// backends. Both compute in float32 from the same stored weights; they
// differ only in summation order (BLAS sgemm or MLX's quantized kernel vs
// the CPU kernels, MLX's attention vs ours), about n·2⁻²⁴ relative per
// dot product of n terms (n ≤ 512 here: 3e-5), compounded over 4 layers
// and the norms between them. Measured: under 2e-6.
const parityTol = 1e-4

// nativeTol bounds max |Δ logit| / max |logit| between the MLX backend in
// native mode (bf16 activations and KV for a bf16 or bf16-scaled model)
// and the CPU backend (float32). Every op of native mode rounds its
// output to bf16, a relative error of at most u = 2⁻⁸ of the value
// rounded (float32's rounding, 2⁻²⁴, is negligible beside it). A layer
// rounds 13 times along the path to the residual stream (norm, q/k/v,
// RoPE, attention, o_proj, residual add, norm, gate/up, SwiGLU, down,
// residual add), and the final norm, the head and the embedding rows 3
// more; the normalized maps of these models pass a relative error on with
// a gain near 1. To first order the errors add: (13·layers + 3)·u =
// 55·2⁻⁸ ≈ 0.21 of the logits' scale for 4 layers, the worst case with
// every rounding the same way. Rounding errors are independent and of
// both signs, so the typical error is √55·u ≈ 0.03; measured: see the
// log (about 1e-2). The bound asserted is the first-order worst case.
// GGUF models compute in float32 in both modes (dequantized at load):
// parityTol applies to them.
const nativeTol = (13*4 + 3) * (1.0 / 256)

// testParityWithCPU runs the same prompt and greedy decode steps through
// a model on each backend: logits within tol of the logits' scale, and
// the same greedy tokens wherever the CPU's top two differ by more than
// the bound (in float32 mode, everywhere it matters). Both sides are fed
// the CPU's tokens.
func testParityWithCPU(t *testing.T, be *Backend, cb *cpu.Backend, tol float64) {
	for _, f := range backendFormats {
		t.Run(f.name, func(t *testing.T) {
			mm, cm, ms, cs := loadPair(t, be, cb, demoModel(t, f.arch, f.opts))
			toks := promptTokens(1, 300)
			worst := 0.0
			ftol := tol
			if f.opts.Format == demo.FormatGGUF {
				ftol = parityTol // float32 in both modes
			}
			if slices.Contains([]string{"qwen3_moe", "gpt_oss", "deepseek_v3", "glm4_moe", "qwen3_next"}, f.arch) && tol != parityTol {
				// A router's top k is not continuous in its logits: one
				// bf16 rounding can swap an expert, so native mode has no
				// first-order bound against float32 here. Its float32
				// mode is checked against the CPU (ParityWithCPU); a
				// native-mode check against mlx-lm is still to come.
				t.Skip("mixture of experts: no bf16-vs-float32 bound (routing is discontinuous)")
			}
			if f.opts.GGUFType == "q3_k_m" && tol != parityTol {
				// GGUF weights compute in float32 in both modes: native
				// mode would repeat ParityWithCPU (18 s under -race).
				t.Skip("a GGUF computes in float32 in both modes: ParityWithCPU checks it")
			}
			for step := range 8 {
				got := fwd(t, mm, []model.Input{{Seq: ms, Tokens: toks, AllLogits: true}}, model.Range{}, nil).Logits[0]
				want := fwd(t, cm, []model.Input{{Seq: cs, Tokens: toks, AllLogits: true}}, model.Range{}, nil).Logits[0]
				if len(got) != len(want) {
					t.Fatalf("step %d: %d logits, want %d", step, len(got), len(want))
				}
				d := maxDiff(got, want)
				worst = max(worst, d)
				if d > ftol {
					t.Fatalf("step %d: max |Δ logit| %.3g of the logits' scale > %g", step, d, ftol)
				}
				vocab := len(want) / len(toks)
				last := want[len(want)-vocab:]
				next, best := argmax(got[len(got)-vocab:]), argmax(last)
				if next != best && topGap(last) > 2*ftol*scaleOf(want) {
					t.Fatalf("step %d: greedy token %d, CPU %d", step, next, best)
				}
				toks = []int{best}
			}
			if ms.Len() != 307 {
				t.Errorf("MLX sequence holds %d positions, want 307", ms.Len())
			}
			t.Logf("max |Δ logit| / max |logit| over a 300-token prefill and 7 decode steps: %.3g", worst)
		})
	}
}

// testBatchedVsAlone: three sequences at different positions, one
// decoding and two prefilling, give the same logits batched as alone.
// MLX's products are row-independent on the CPU (reference BLAS,
// per-row quantized kernels, and bf16 products too) and attention runs
// per sequence, so the results are bit-identical, in both modes.
func testBatchedVsAlone(t *testing.T, be *Backend, formats int) {
	for _, f := range backendFormats[:formats] {
		t.Run(f.name, func(t *testing.T) {
			m := loadModel(t, be, demoModel(t, f.arch, f.opts), model.Range{})
			history := [][]int{promptTokens(3, 300), promptTokens(4, 10), nil}
			next := [][]int{{9}, promptTokens(5, 25), promptTokens(6, 7)}
			alone, batched := make([]*model.Sequence, 3), make([]*model.Sequence, 3)
			for i := range 3 {
				alone[i], batched[i] = newSeq(t, m), newSeq(t, m)
				if history[i] != nil {
					fwd(t, m, []model.Input{{Seq: alone[i], Tokens: history[i]}}, model.Range{}, nil)
					fwd(t, m, []model.Input{{Seq: batched[i], Tokens: history[i]}}, model.Range{}, nil)
				}
			}
			for step := range 3 {
				var in []model.Input
				var want [][]float32
				for i := range 3 {
					toks := next[i]
					if step > 0 {
						toks = []int{(step*17 + i*5) % 600}
					}
					want = append(want, fwd(t, m, []model.Input{{Seq: alone[i], Tokens: toks, AllLogits: true}}, model.Range{}, nil).Logits[0])
					in = append(in, model.Input{Seq: batched[i], Tokens: toks, AllLogits: true})
				}
				got := fwd(t, m, in, model.Range{}, nil).Logits
				for i := range 3 {
					if d := maxDiff(got[i], want[i]); d != 0 {
						t.Fatalf("step %d, sequence %d: batched differs from alone by %.3g", step, i, d)
					}
				}
			}
		})
	}
}

// testLayerRanges: layers [0, k) then [k, L) on two stage models, the
// hidden state handed over, give the logits of [0, L) exactly. In native
// mode the bf16 hidden state goes over as float32 (exact) and the second
// stage's Input takes the type of its first layer's norm weight: bf16
// again.
func testLayerRanges(t *testing.T, be *Backend, formats int) {
	for _, f := range backendFormats[:formats] {
		t.Run(f.name, func(t *testing.T) {
			path := demoModel(t, f.arch, f.opts)
			full := loadModel(t, be, path, model.Range{})
			L := full.Config.NumHiddenLayers
			first, second := loadModel(t, be, path, model.Range{Start: 0, End: 2}), loadModel(t, be, path, model.Range{Start: 2, End: L})
			ref, s1, s2 := newSeq(t, full), newSeq(t, first), newSeq(t, second)
			for i, toks := range [][]int{promptTokens(1, 37), {5}, {77}} {
				want := fwd(t, full, []model.Input{{Seq: ref, Tokens: toks, AllLogits: true}}, model.Range{}, nil).Logits[0]
				h := fwd(t, first, []model.Input{{Seq: s1, Tokens: toks}}, model.Range{}, nil).Hidden
				got := fwd(t, second, []model.Input{{Seq: s2, Len: len(toks), AllLogits: true}}, model.Range{}, h).Logits[0]
				if d := maxDiff(got, want); d != 0 {
					t.Fatalf("step %d: two stages differ from the whole model by %.3g", i, d)
				}
			}
		})
	}
}

// testKVExportImport: positions exported from one sequence and imported
// into a fresh one continue bit-identically.
func testKVExportImport(t *testing.T, be *Backend) {
	m := loadModel(t, be, demoModel(t, "qwen3", demo.Options{}), model.Range{})
	src := newSeq(t, m)
	prompt := promptTokens(7, 300)
	fwd(t, m, []model.Input{{Seq: src, Tokens: prompt}}, model.Range{}, nil)
	if src.KVFormat() != KVLayout {
		t.Errorf("format %q", src.KVFormat())
	}
	dst := newSeq(t, m)
	for _, r := range [][2]int{{0, 64}, {64, 128}, {128, 300}} {
		block, err := src.ExportKV(r[0], r[1])
		if err != nil {
			t.Fatal(err)
		}
		if len(block) != (r[1]-r[0])*int(m.KVBytesPerToken()) {
			t.Fatalf("block of %d positions: %d bytes, want %d", r[1]-r[0], len(block), (r[1]-r[0])*int(m.KVBytesPerToken()))
		}
		if err := dst.ImportKV(block); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := src.ExportKV(0, 300)
	b, _ := dst.ExportKV(0, 300)
	if string(a) != string(b) {
		t.Fatal("the imported positions differ from the exported ones")
	}
	for _, toks := range [][]int{{11}, {12}} {
		want := fwd(t, m, []model.Input{{Seq: src, Tokens: toks}}, model.Range{}, nil).Logits[0]
		got := fwd(t, m, []model.Input{{Seq: dst, Tokens: toks}}, model.Range{}, nil).Logits[0]
		if d := maxDiff(got, want); d != 0 {
			t.Fatalf("after import: logits differ by %.3g", d)
		}
	}
	alloc, used := dst.CacheBytes()
	per := m.KVBytesPerToken() // float32 blocks
	if !be.f32 {
		per /= 2 // bf16 in memory
	}
	if want := 302 * per; used != want || alloc != 512*per {
		t.Errorf("cache bytes (%d, %d), want (%d, %d)", alloc, used, 512*per, want)
	}
	if err := dst.ImportKV(make([]byte, 3)); err == nil {
		t.Error("a block of 3 bytes imported")
	}
}

// testModelRelease: closing a model frees its weights' MLX memory (and a
// model that fails to load frees what it had uploaded).
func testModelRelease(t *testing.T, be *Backend) {
	ctx := context.Background()
	path := demoModel(t, "qwen3", demo.Options{Quantize: 4, GroupSize: 32})
	before, err := be.Runtime().Memory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(ctx, path, be, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	loaded, _ := be.Runtime().Memory(ctx)
	if loaded.Active-before.Active < m.WeightBytes() {
		t.Errorf("loading %d bytes of weights grew MLX's active memory by %d", m.WeightBytes(), loaded.Active-before.Active)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	after, _ := be.Runtime().Memory(ctx)
	if after.Active != before.Active {
		t.Errorf("active memory %d after closing the model, %d before (%d loaded)", after.Active, before.Active, loaded.Active)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := model.Load(cctx, path, be, model.Options{}); err == nil {
		t.Fatal("a load with a cancelled context succeeded")
	}
	if failed, _ := be.Runtime().Memory(ctx); failed.Active != before.Active {
		t.Errorf("active memory %d after a failed load, %d before", failed.Active, before.Active)
	}
}

// testStepMemory: a step's arrays are freed by Close, and Release frees
// intermediates: active memory returns to its level before the step.
func testStepMemory(t *testing.T, be *Backend) {
	ctx := context.Background()
	m := loadModel(t, be, demoModel(t, "qwen3", demo.Options{}), model.Range{})
	seq := newSeq(t, m)
	fwd(t, m, []model.Input{{Seq: seq, Tokens: promptTokens(2, 20)}}, model.Range{}, nil)
	before, err := be.Runtime().Memory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		fwd(t, m, []model.Input{{Seq: seq, Tokens: []int{3}}}, model.Range{}, nil)
	}
	after, err := be.Runtime().Memory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Three decode steps stay within the cache's first 256 positions: no
	// growth at all once the steps are closed.
	if after.Active != before.Active {
		t.Errorf("active memory %d after three closed steps, %d before", after.Active, before.Active)
	}
	// A step cancelled by its client fails, leaves the sequence where it
	// was, and frees what it built.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.Forward(cctx, []model.Input{{Seq: seq, Tokens: promptTokens(9, 40)}}, model.Range{}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled forward: %v", err)
	}
	if seq.Len() != 23 {
		t.Errorf("after a cancelled step the sequence holds %d positions, want 23", seq.Len())
	}
	if mem, _ := be.Runtime().Memory(ctx); mem.Active != before.Active {
		t.Errorf("active memory %d after a cancelled step, %d before", mem.Active, before.Active)
	}
	s := be.NewStep(ctx)
	x := s.Input(64, 1024, make([]float32, 64*1024))
	for range 8 {
		mk := s.Mark()
		x = s.Release(mk, s.Add(s.Add(x, x), x))
	}
	if err := s.Eval(x); err != nil {
		t.Fatal(err)
	}
	held := s.(*step).a.Len()
	s.Close()
	// The input and each layer's output (made before the next mark, so
	// kept, as on the CPU backend); each layer's inner sum is freed.
	if held != 9 {
		t.Errorf("after 8 released layers the step holds %d arrays, want 9", held)
	}
	end, _ := be.Runtime().Memory(ctx)
	if end.Active != before.Active {
		t.Errorf("active memory %d after closing the step, %d before", end.Active, before.Active)
	}
}

// testStepError: an MLX failure inside a step is the step's error (Read,
// Err), the step can be closed, and the backend keeps working; a
// cancelled context fails Read without running it.
func testStepError(t *testing.T, be *Backend) {
	ctx := context.Background()
	s := be.NewStep(ctx)
	st := s.(*step)
	x := s.Input(2, 3, []float32{1, 2, 3, 4, 5, 6})
	bad := st.record(2, 3, tensor.F32, func(a *Arena) *Array { return a.Reshape(x.(*node).x, 4, 4) })
	_, err := s.Read(s.Add(bad, x))
	var me *Error
	if !errors.As(err, &me) || me.Op != "mlx_reshape" || !errors.Is(s.Err(), err) {
		t.Errorf("Read after a failing op: %v (Err %v)", err, s.Err())
	}
	s.Close()

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	s = be.NewStep(cctx)
	if _, err := s.Read(s.Input(1, 1, []float32{1})); !errors.Is(err, context.Canceled) {
		t.Errorf("Read with a cancelled context: %v", err)
	}
	s.Close()

	s = be.NewStep(ctx)
	defer s.Close()
	got, err := s.Read(s.Add(s.Input(1, 2, []float32{1, 2}), s.Input(1, 2, []float32{3, 4})))
	if err != nil || fmt.Sprint(got) != "[4 6]" {
		t.Errorf("after the failures: %v, %v", got, err)
	}
}

// testNativeTypes: native mode keeps the KV cache in the model's type
// (bf16 for bf16 weights and for bf16-scaled 4-bit ones: half the bytes
// of float32 mode; float32 for an f32 model and for GGUF, whose weights
// are float32 or float32-scaled on the device), and its logits are not float32 mode's (they are rounded to
// bf16 on the way), except where both compute in float32.
func testNativeTypes(t *testing.T, be, fb *Backend) {
	for _, f := range backendFormats {
		t.Run(f.name, func(t *testing.T) {
			if f.arch == "gemma3_text" {
				// Gemma's 1+w norm weights are made in float32 at load, so
				// on MLX its activations stay float32 in native mode too
				// (correct, not yet mlx-lm's bf16 path).
				t.Skip("gemma3_text computes in float32 on MLX (its 1+w norms are widened at load)")
			}
			if f.arch == "qwen3_next" {
				// Its recurrent state is float32 in both modes, and only
				// one layer in four fills the KV cache: this check's
				// byte counts do not apply (ParityWithCPU covers it).
				t.Skip("qwen3_next: recurrent state, not a KV cache, in 3 of 4 layers")
			}
			nm, fm, ns, fs := loadPair(t, be, fb, demoModel(t, f.arch, f.opts))
			toks := promptTokens(2, 40)
			got := fwd(t, nm, []model.Input{{Seq: ns, Tokens: toks}}, model.Range{}, nil).Logits[0]
			want := fwd(t, fm, []model.Input{{Seq: fs, Tokens: toks}}, model.Range{}, nil).Logits[0]
			_, nUsed := ns.CacheBytes()
			_, fUsed := fs.CacheBytes()
			float32Model := f.opts.DType == "f32" || f.opts.Format == demo.FormatGGUF
			wantUsed := fUsed / 2
			if float32Model {
				wantUsed = fUsed
			}
			if nUsed != wantUsed || fUsed != 40*fm.KVBytesPerToken() {
				t.Errorf("KV bytes in use: native %d, float32 %d; want %d, %d", nUsed, fUsed, wantUsed, 40*fm.KVBytesPerToken())
			}
			d := maxDiff(got, want)
			if float32Model && d > parityTol || !float32Model && (d == 0 || d > nativeTol) {
				t.Errorf("native vs float32 logits: %.3g of the logits' scale", d)
			}
			t.Logf("native vs float32 mode: %.3g of the logits' scale; KV %d vs %d bytes", d, nUsed, fUsed)
		})
	}
}
