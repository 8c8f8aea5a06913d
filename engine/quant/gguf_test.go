package quant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fusion/engine/demo"
	"fusion/engine/gguf"
	"fusion/engine/tensor"
	"fusion/internal/testenv"
)

// TestGGUFTensorType: the per-tensor type rules (llama.cpp's
// llama_tensor_get_type for these families) on hand-picked cases.
func TestGGUFTensorType(t *testing.T) {
	m := []int64{512, 256}
	tests := []struct {
		typ, name string
		shape     []int64
		tied      bool
		want      tensor.DType
	}{
		{GGUFQ4_K_M, "blk.0.attn_norm.weight", []int64{256}, false, tensor.F32},
		{GGUFQ4_K_M, "blk.1.attn_q.weight", m, false, tensor.Q4_K},
		{GGUFQ4_K_M, "blk.0.attn_v.weight", m, false, tensor.Q6_K}, // first eighth
		{GGUFQ4_K_M, "blk.1.attn_v.weight", m, false, tensor.Q4_K},
		{GGUFQ4_K_M, "blk.3.ffn_down.weight", m, false, tensor.Q6_K}, // (3-1)%3 == 2
		{GGUFQ4_K_M, "blk.4.ffn_down.weight", m, false, tensor.Q4_K},
		{GGUFQ4_K_M, "blk.7.ffn_down.weight", m, false, tensor.Q6_K}, // last eighth
		{GGUFQ4_K_M, "blk.7.ffn_up.weight", m, false, tensor.Q4_K},
		{GGUFQ4_K_M, "output.weight", m, false, tensor.Q6_K},
		{GGUFQ4_K_M, "token_embd.weight", m, false, tensor.Q4_K},
		{GGUFQ4_K_M, "token_embd.weight", m, true, tensor.Q6_K}, // serves as the output
		{GGUFQ4_K_M, "blk.1.attn_q.weight", []int64{64, 64}, false, tensor.Q8_0},
		{GGUFQ4_K_M, "blk.0.attn_v.weight", []int64{64, 64}, false, tensor.Q8_0},
		{GGUFQ4_K_M, "output.weight", []int64{64, 64}, false, tensor.Q8_0},
		{GGUFQ4_K_M, "blk.1.attn_q.weight", []int64{8, 48}, false, tensor.F16},
		{GGUFQ6_K, "blk.1.attn_q.weight", m, false, tensor.Q6_K},
		{GGUFQ6_K, "token_embd.weight", m, false, tensor.Q6_K},
		{GGUFQ8_0, "output.weight", m, false, tensor.Q8_0},
		{GGUFQ8_0, "token_embd.weight", m, true, tensor.Q8_0},
		{GGUFQ8_0, "blk.0.attn_v.weight", m, false, tensor.Q8_0},
		// A mixture: the router stays F32, stacked experts follow their
		// dense counterparts' rules.
		{GGUFQ4_K_M, "blk.3.ffn_gate_inp.weight", []int64{128, 256}, false, tensor.F32},
		{GGUFQ8_0, "blk.3.ffn_gate_inp.weight", []int64{128, 256}, false, tensor.F32},
		{GGUFQ4_K_M, "blk.3.ffn_down_exps.weight", []int64{8, 256, 512}, false, tensor.Q6_K},
		{GGUFQ4_K_M, "blk.4.ffn_down_exps.weight", []int64{8, 256, 512}, false, tensor.Q4_K},
		{GGUFQ4_K_M, "blk.3.ffn_gate_exps.weight", []int64{8, 512, 256}, false, tensor.Q4_K},
		{GGUFQ4_K_M, "blk.3.ffn_up_exps.weight", []int64{8, 512, 64}, false, tensor.Q8_0},
		{GGUFQ6_K, "blk.4.ffn_down_exps.weight", []int64{8, 256, 512}, false, tensor.Q6_K},
		// Q5_K_M: Q5_K, with Q4_K_M's Q6_K layers.
		{GGUFQ5_K_M, "blk.1.attn_q.weight", m, false, tensor.Q5_K},
		{GGUFQ5_K_M, "blk.0.attn_v.weight", m, false, tensor.Q6_K},
		{GGUFQ5_K_M, "blk.1.attn_v.weight", m, false, tensor.Q5_K},
		{GGUFQ5_K_M, "blk.3.ffn_down.weight", m, false, tensor.Q6_K},
		{GGUFQ5_K_M, "blk.4.ffn_down_exps.weight", []int64{8, 256, 512}, false, tensor.Q5_K},
		{GGUFQ5_K_M, "blk.1.attn_output.weight", m, false, tensor.Q5_K},
		{GGUFQ5_K_M, "output.weight", m, false, tensor.Q6_K},
		{GGUFQ5_K_M, "token_embd.weight", m, false, tensor.Q5_K},
		{GGUFQ5_K_M, "blk.1.attn_q.weight", []int64{64, 64}, false, tensor.Q8_0}, // llama.cpp: Q5_1
		// Q3_K_M: Q3_K; attn_v Q5_K in layers 0–1 then Q4_K, ffn_down Q5_K
		// in the first sixteenth (none of 8 layers) then Q4_K, attn_output Q4_K.
		{GGUFQ3_K_M, "blk.1.attn_q.weight", m, false, tensor.Q3_K},
		{GGUFQ3_K_M, "blk.7.ffn_up.weight", m, false, tensor.Q3_K},
		{GGUFQ3_K_M, "blk.1.attn_v.weight", m, false, tensor.Q5_K},
		{GGUFQ3_K_M, "blk.2.attn_v.weight", m, false, tensor.Q4_K},
		{GGUFQ3_K_M, "blk.0.ffn_down.weight", m, false, tensor.Q4_K},
		{GGUFQ3_K_M, "blk.5.ffn_down_exps.weight", []int64{8, 256, 512}, false, tensor.Q4_K},
		{GGUFQ3_K_M, "blk.4.attn_output.weight", m, false, tensor.Q4_K},
		{GGUFQ3_K_M, "output.weight", m, false, tensor.Q6_K},
		{GGUFQ3_K_M, "blk.1.attn_q.weight", []int64{64, 64}, false, tensor.Q4_0},
		{GGUFQ3_K_M, "blk.1.attn_q.weight", []int64{8, 48}, false, tensor.F16},
		// Q2_K: Q2_K; attn_v Q3_K (GQA 2), ffn_down and attn_output Q3_K.
		{GGUFQ2_K, "blk.1.attn_q.weight", m, false, tensor.Q2_K},
		{GGUFQ2_K, "blk.3.attn_v.weight", m, false, tensor.Q3_K},
		{GGUFQ2_K, "blk.3.ffn_down.weight", m, false, tensor.Q3_K},
		{GGUFQ2_K, "blk.3.attn_output.weight", m, false, tensor.Q3_K},
		{GGUFQ2_K, "token_embd.weight", m, false, tensor.Q2_K},
		{GGUFQ2_K, "token_embd.weight", m, true, tensor.Q6_K},
	}
	for _, tc := range tests {
		gm := GGUFModel{Layers: 8, Tied: tc.tied, GQA: 2}
		if got := GGUFTensorType(tc.typ, tc.name, tc.shape, gm); got != tc.want {
			t.Errorf("%s %s %v tied=%v: %v, want %v", tc.typ, tc.name, tc.shape, tc.tied, got, tc.want)
		}
	}
	// The model-wide rules: Q2_K's attn_v with GQA ≥ 4; a Q3_K_M of 32
	// layers gives ffn_down Q5_K in layers 0 and 1; with exactly 8
	// experts, attn_v and attn_k are Q8_0 and attn_output Q5_K.
	for _, tc := range []struct {
		typ, name string
		m         GGUFModel
		want      tensor.DType
	}{
		{GGUFQ2_K, "blk.3.attn_v.weight", GGUFModel{Layers: 8, GQA: 4}, tensor.Q4_K},
		{GGUFQ3_K_M, "blk.1.ffn_down.weight", GGUFModel{Layers: 32, GQA: 4}, tensor.Q5_K},
		{GGUFQ3_K_M, "blk.2.ffn_down.weight", GGUFModel{Layers: 32, GQA: 4}, tensor.Q4_K},
		{GGUFQ4_K_M, "blk.1.attn_v.weight", GGUFModel{Layers: 8, Experts: 8}, tensor.Q8_0},
		{GGUFQ6_K, "blk.1.attn_k.weight", GGUFModel{Layers: 8, Experts: 8}, tensor.Q8_0},
		{GGUFQ4_K_M, "blk.1.attn_k.weight", GGUFModel{Layers: 8, Experts: 4}, tensor.Q4_K},
		{GGUFQ4_K_M, "blk.1.attn_output.weight", GGUFModel{Layers: 8, Experts: 8}, tensor.Q5_K},
		{GGUFQ2_K, "blk.1.attn_output.weight", GGUFModel{Layers: 8, Experts: 8}, tensor.Q5_K},
		{GGUFQ5_K_M, "blk.1.attn_output.weight", GGUFModel{Layers: 8, Experts: 8}, tensor.Q5_K},
		{GGUFQ4_K_M, "blk.1.attn_output.weight", GGUFModel{Layers: 8, Experts: 128}, tensor.Q4_K},
	} {
		if got := GGUFTensorType(tc.typ, tc.name, []int64{512, 256}, tc.m); got != tc.want {
			t.Errorf("%s %s %+v: %v, want %v", tc.typ, tc.name, tc.m, got, tc.want)
		}
	}
}

// TestGGUFOptions: format and type are checked (a 4xx for the admin API).
func TestGGUFOptions(t *testing.T) {
	for _, o := range []Options{
		{Format: "gguf"}, {Format: "gguf", GGUFType: "Q4_K_S"}, {Format: "gguf", GGUFType: "Q8_0", TargetBits: 4.5},
		{GGUFType: "Q8_0"}, {Format: "onnx"},
	} {
		if err := o.Validate(); !errors.Is(err, ErrBadOptions) {
			t.Errorf("%+v: %v, want ErrBadOptions", o, err)
		}
	}
	o := Options{Format: "GGUF", GGUFType: "q4_k_m"}
	if err := o.Validate(); err != nil || o.Format != FormatGGUF || o.GGUFType != GGUFQ4_K_M {
		t.Errorf("%+v: %v", o, err)
	}
}

// TestGGUFRefuses: a family without a GGUF export here (phi3's fused
// projections) is refused before any work, and by Quantize.
func TestGGUFRefuses(t *testing.T) {
	src := demoDir(t, demo.Options{Arch: "phi3"})
	if err := CheckGGUFSource(src); !errors.Is(err, ErrUnsupported) {
		t.Errorf("CheckGGUFSource: %v, want ErrUnsupported", err)
	}
	if _, err := Quantize(context.Background(), src, filepath.Join(t.TempDir(), "o"), Options{Format: FormatGGUF, GGUFType: GGUFQ8_0}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Quantize: %v, want ErrUnsupported", err)
	}
	if err := CheckGGUFSource(demoDir(t, demo.Options{})); err != nil {
		t.Errorf("qwen3: %v", err)
	}
}

// TestGGUFExport writes GGUF files from float demo models and checks them
// with the gguf Python package (names by its own map, metadata, every
// Q8_0/Q5_0/F32 tensor bit-identical to gguf.quants.quantize, K-quants
// dequantized within their error), then loads each in fusion: the
// embedded tokenizer encodes the text as the source's does and the
// perplexity on the bundled text's first paragraph stays near the
// source's. (The demo weights are random, so the perplexities themselves
// are meaningless and their difference is noisy: on the llama case MLX's
// own uniform 4-bit g32 moves the NLL by +0.20 nats and 6-bit g64 by
// +0.06, so the bounds only catch a broken model, which moves it by
// nats.)
func TestGGUFExport(t *testing.T) {
	py := testenv.Python(t)
	tests := []struct {
		name   string
		o      demo.Options
		typ    string
		types  map[string]tensor.DType // expected types of some tensors
		maxK   float64                 // K-quant max error relative to max |w| (gguf package)
		maxErr float64                 // any tensor's max error relative to max |w| (fusion's reader)
		maxDN  float64                 // |ΔNLL| bound, nats per token
		short  bool                    // score only the first sentence (a load check; keeps -race time down)
	}{
		{"llama q4_k_m", demo.Options{Arch: "llama", Layers: 2, Hidden: 256, Heads: 4, KVHeads: 2, Intermediate: 256, Untied: true, Seed: 2}, GGUFQ4_K_M,
			map[string]tensor.DType{"blk.0.attn_v.weight": tensor.Q4_K, "blk.1.attn_v.weight": tensor.Q6_K, "blk.1.ffn_down.weight": tensor.Q6_K,
				"blk.0.ffn_down.weight": tensor.Q4_K, "blk.1.attn_q.weight": tensor.Q4_K, "rope_freqs.weight": tensor.F32,
				"output.weight": tensor.Q6_K, "token_embd.weight": tensor.Q4_K, "blk.0.attn_norm.weight": tensor.F32}, 0.15, 0.15, 0.4, false},
		{"qwen3 tied q6_k", demo.Options{Hidden: 256, Heads: 4, Intermediate: 512, Seed: 3}, GGUFQ6_K,
			map[string]tensor.DType{"token_embd.weight": tensor.Q6_K, "blk.1.ffn_up.weight": tensor.Q6_K, "blk.0.attn_q_norm.weight": tensor.F32}, 0.05, 0.05, 0.05, false},
		{"qwen3 q4_k_m fallback", demo.Options{Seed: 4}, GGUFQ4_K_M,
			map[string]tensor.DType{"token_embd.weight": tensor.Q8_0, "blk.1.attn_v.weight": tensor.Q8_0, "blk.0.attn_q.weight": tensor.Q8_0}, 0, 0.01, 0.1, true},
		{"mistral f32 q8_0", demo.Options{Arch: "mistral", DType: "f32", Untied: true, Seed: 6}, GGUFQ8_0,
			map[string]tensor.DType{"output.weight": tensor.Q8_0, "blk.0.attn_k.weight": tensor.Q8_0}, 0, 0.01, 0.1, true},
	}
	// The first paragraph of the bundled text keeps the CPU forward passes short.
	paragraph := EvalText[:strings.Index(EvalText, "\n\n")]
	var args []string
	for _, tc := range tests {
		src := demoDir(t, tc.o)
		var steps int
		res, err := Quantize(context.Background(), src, filepath.Join(t.TempDir(), "out"), Options{Format: FormatGGUF, GGUFType: tc.typ,
			Progress: func(done, total int) { steps = done }})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !strings.HasSuffix(res.Dir, "out.gguf") || res.Type != tc.typ || res.Format != FormatGGUF || steps != res.Tensors || res.Bytes == 0 {
			t.Errorf("%s: result %+v, %d steps", tc.name, res, steps)
		}
		f, err := gguf.Open(res.Dir, gguf.LoadMmap)
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range tc.types {
			if got, ok := f.Tensor(name); !ok || got.DType != want {
				t.Errorf("%s: %s is %v (present %v), want %v", tc.name, name, got.DType, ok, want)
			}
		}
		checkRoundTrip(t, tc.name, src, f, tc.maxErr)
		f.Close()
		args = append(args, src, res.Dir, tc.o.Arch)
		if tc.o.Arch == "" {
			args[len(args)-1] = "qwen3"
		}

		// fusion loads it: same tokens, perplexity near the source's.
		a, err := loadTokenizer(src)
		if err != nil {
			t.Fatal(err)
		}
		b, err := loadTokenizer(res.Dir)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a.Encode(EvalText, true), b.Encode(EvalText, true)) {
			t.Errorf("%s: the GGUF's tokenizer encodes the text differently", tc.name)
		}
		text := paragraph
		if tc.short {
			text = paragraph[:strings.Index(paragraph, ".")+1]
		}
		perplexityDelta(t, fmt.Sprintf("%s: %d tensors %v, %.3f bits/weight, %d bytes", tc.name, res.Tensors, res.TensorTypes, res.BitsPerWeight, res.Bytes),
			src, res.Dir, text, tc.maxDN)
	}

	out, err := exec.Command(py, append([]string{filepath.Join("testdata", "gguf_export_ref.py")}, args...)...).CombinedOutput()
	if err != nil && !testenv.Required() && strings.Contains(string(out), "ModuleNotFoundError") {
		t.Skipf("%s lacks a module:\n%s", py, out)
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(tests) {
		t.Fatalf("%d reports for %d files:\n%s", len(lines), len(tests), out)
	}
	for i, tc := range tests {
		var r struct {
			Arch     string             `json:"arch"`
			Layers   int                `json:"layers"`
			FileType uint32             `json:"file_type"`
			Tokens   int                `json:"tokens"`
			Exact    int                `json:"exact"`
			KQuant   map[string]float64 `json:"kquant"`
			Types    map[string]string  `json:"types"`
			Errors   []string           `json:"errors"`
		}
		if err := json.Unmarshal([]byte(lines[i]), &r); err != nil {
			t.Fatalf("%s: %v in %s", tc.name, err, lines[i])
		}
		for _, e := range r.Errors {
			t.Errorf("%s: %s", tc.name, e)
		}
		if r.FileType != ggufFileType[tc.typ] || r.Layers != max(tc.o.Layers, 2) || r.Tokens == 0 {
			t.Errorf("%s: gguf package read %+v", tc.name, r)
		}
		for name, e := range r.KQuant {
			if e > tc.maxK {
				t.Errorf("%s: %s (%s) dequantized by the gguf package: max error %g of max |w|, over %g", tc.name, name, r.Types[name], e, tc.maxK)
			}
		}
		t.Logf("%s: gguf package: arch %s, %d tensors bit-identical to gguf.quants.quantize, %d K-quant tensors within error",
			tc.name, r.Arch, r.Exact, len(r.KQuant))
		if r.Exact+len(r.KQuant) != len(r.Types) {
			t.Errorf("%s: %d tensors checked of %d", tc.name, r.Exact+len(r.KQuant), len(r.Types))
		}
	}
}

// perplexityDelta scores text under the source model src and under its
// export dst, logs both perplexities after what (the export described),
// and fails when the mean negative log-likelihood moved by more than
// maxDN nats per token.
func perplexityDelta(t *testing.T, what, src, dst, text string, maxDN float64) {
	t.Helper()
	ps, err := Perplexity(context.Background(), src, text, 0)
	if err != nil {
		t.Fatal(err)
	}
	pq, err := Perplexity(context.Background(), dst, text, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := pq.NLL - ps.NLL
	t.Logf("%s; perplexity %.4f → %.4f (ΔNLL %+.5f nats/token over %d tokens)", what, ps.Perplexity, pq.Perplexity, d, pq.Tokens)
	if abs(d) > maxDN {
		t.Errorf("%s: ΔNLL %g over %g", what, d, maxDN)
	}
}

// checkRoundTrip reads every tensor of the GGUF back as fusion's loader
// does (Q/K rows of llama unpermuted) and compares it with the source.
func checkRoundTrip(t *testing.T, name, src string, f *gguf.File, maxErr float64) {
	t.Helper()
	s, err := openSource(src, DefaultGroupSize, ggufArchitectures)
	if err != nil {
		t.Fatal(err)
	}
	defer s.w.Close()
	arch := ggufArch[s.cfg.Architecture]
	for _, hf := range s.names {
		g, _ := gguf.GGUFName(hf)
		got, ok := f.Tensor(g)
		if !ok {
			t.Errorf("%s: no tensor %s", name, g)
			continue
		}
		if heads := gguf.QKHeads(hf, s.cfg.NumAttentionHeads, s.cfg.NumKeyValueHeads); heads > 0 && gguf.NeedsQKPermute(arch) {
			if got, err = gguf.UnpermuteQK(got, heads); err != nil {
				t.Fatal(err)
			}
		}
		vals, err := gguf.ToFloat32(got)
		if err != nil {
			t.Fatal(err)
		}
		src, _ := s.w.Tensor(hf)
		want, err := tensor.Floats(src)
		if err != nil {
			t.Fatal(err)
		}
		var maxAbs, maxDiff float64
		for i, v := range want {
			maxAbs = max(maxAbs, abs(float64(v)))
			maxDiff = max(maxDiff, abs(float64(v)-float64(vals[i])))
		}
		if maxDiff > maxErr*maxAbs {
			t.Errorf("%s: %s (%v) read back with max error %g, over %g of max |w| %g", name, g, got.DType, maxDiff, maxErr, maxAbs)
		}
	}
}
