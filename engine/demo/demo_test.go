package demo

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"fusion/engine/gguf"
	"fusion/engine/modelfile"
	"fusion/engine/safetensors"
	"fusion/engine/tensor"
)

func TestTensorNames(t *testing.T) {
	layer := func(l int, qwen bool) []string {
		p := fmt.Sprintf("model.layers.%d.", l)
		names := []string{p + "input_layernorm.weight", p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
			p + "self_attn.v_proj.weight", p + "self_attn.o_proj.weight"}
		if qwen {
			names = append(names, p+"self_attn.q_norm.weight", p+"self_attn.k_norm.weight")
		}
		return append(names, p+"post_attention_layernorm.weight", p+"mlp.gate_proj.weight", p+"mlp.up_proj.weight", p+"mlp.down_proj.weight")
	}
	tests := []struct {
		opts Options
		want []string
	}{
		{Options{}, slices.Concat([]string{"model.embed_tokens.weight"}, layer(0, true), layer(1, true), []string{"model.norm.weight"})},
		{Options{Arch: "llama", Layers: 1, Untied: true}, slices.Concat([]string{"model.embed_tokens.weight"}, layer(0, false), []string{"model.norm.weight", "lm_head.weight"})},
	}
	for _, tc := range tests {
		m, err := Build(tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ts := range m.Tensors {
			got = append(got, ts.Name)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%+v:\ngot  %q\nwant %q", tc.opts, got, tc.want)
		}
	}
}

func TestBuildOptions(t *testing.T) {
	m, err := Build(Options{Arch: "llama", Hidden: 96, Heads: 6, KVHeads: 3, Intermediate: 160, Layers: 3, DType: "f32", Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	p := m.Params
	if p.HeadDim != 16 || p.Vocab != 640 || p.Vocab%64 != 0 || p.Vocab < len(m.Tokenizer.Tokens) || m.DType != tensor.F32 || p.RopeScaling["rope_type"] != "llama3" {
		t.Errorf("params %+v, dtype %v", p, m.DType)
	}
	// Padding rows (ids past the tokenizer) are zero: they lack the bias
	// channel every token's row has, so no id without a token is ever
	// sampled.
	emb := m.Tensors[0]
	for i, v := range emb.Data[len(m.Tokenizer.Tokens)*p.Hidden:] {
		if v != 0 {
			t.Fatalf("padding row value %d = %v, want 0", i, v)
		}
	}
	// gemma4_text's full layers are twice as wide by default, or as given.
	for _, c := range []struct{ given, want int }{{0, 32}, {16, 16}} {
		g := mustBuild(t, Options{Arch: "gemma4_text", Layers: 4, Hidden: 64, Heads: 4, GlobalHeadDim: c.given})
		if got := g.Config["global_head_dim"]; got != c.want || g.Params.GlobalHeadDim != c.want {
			t.Errorf("--global-head-dim %d: config %v, params %d, want %d", c.given, got, g.Params.GlobalHeadDim, c.want)
		}
	}
	bad := []Options{
		{Arch: "falcon"}, {Heads: 5}, {Heads: 4, KVHeads: 3}, {Quantize: 7}, {Quantize: 4, GroupSize: 48},
		{DType: "f8"}, {Format: "onnx"}, {Hidden: -1}, {VocabFrom: "/nonexistent"},
		{Format: FormatGGUF, Quantize: 5}, {Format: FormatGGUF, GGUFType: "q3_k_xl"}, {GGUFType: "q8_0"},
		// gemma4_text: tied, safetensors, both layer kinds before the
		// KV-shared half.
		{Arch: "gemma4_text", Untied: true}, {Arch: "gemma4_text", Format: FormatGGUF},
		{Arch: "gemma4_text", Layers: 1}, {Arch: "gemma4_text", Layers: 2},
		{Arch: "gemma4_text", Experts: 4, ExpertsPerTok: 5},
		// global_head_dim: gemma4_text's, even.
		{Arch: "llama", GlobalHeadDim: 32}, {Arch: "gemma4_text", Layers: 4, GlobalHeadDim: 33},
		// Of the mixtures only qwen3_moe and gpt_oss have a GGUF writer.
		{Arch: "deepseek_v3", Format: FormatGGUF}, {Arch: "qwen3_5_moe", Format: FormatGGUF},
		// gpt_oss's GGUF experts are MXFP4: rows of whole blocks of 32.
		{Arch: "gpt_oss", Format: FormatGGUF, Hidden: 48, Heads: 2, KVHeads: 1, HeadDim: 16},
		// Only the Gemmas have a vision-language wrapper here; ministral3
		// has no answer clock (its queries' scale moves the logits).
		{Arch: "qwen3", Multimodal: true}, {Arch: "mistral3", Multimodal: true}, {Arch: "ministral3", StopAfter: 20},
		// Distinct layers: 1..Layers, the plain families, no clock.
		{DistinctLayers: 3}, {DistinctLayers: -1}, {Arch: "gemma3_text", DistinctLayers: 1},
		{DistinctLayers: 1, StopAfter: 10},
	}
	for _, o := range bad {
		if _, err := Build(o); err == nil {
			t.Errorf("Build(%+v) succeeded", o)
		}
	}
}

// TestDistinctLayers: with DistinctLayers 2, a 4-layer mixture writes
// every layer's tensors (the same names as without the option), layers 2
// and 3 holding the bytes of layers 0 and 1, which differ; in the MLX
// safetensors (4-bit, the router at 8) and in a GGUF Q8_0 file.
func TestDistinctLayers(t *testing.T) {
	o := Options{Arch: "qwen3_moe", Layers: 4, Quantize: 4, Seed: 5}
	all := mustBuild(t, o)
	o.DistinctLayers = 2
	m := mustBuild(t, o)
	names := func(m *Model) []string {
		var out []string
		for _, ts := range m.Tensors {
			out = append(out, ts.Name)
		}
		slices.Sort(out)
		return out
	}
	if got, want := names(m), names(all); !slices.Equal(got, want) {
		t.Fatalf("tensors\n%q\nwant\n%q", got, want)
	}
	// check: a tensor of layer 2 or 3 has the bytes of its layer-0 or -1
	// twin; layers 0 and 1 differ.
	check := func(kind string, byName map[string][]byte, layer func(int) string) {
		t.Helper()
		same, differ := 0, 0
		for name, b := range byName {
			for l := 2; l < 4; l++ {
				rest, ok := strings.CutPrefix(name, layer(l))
				if !ok {
					continue
				}
				if src := byName[layer(l-2)+rest]; !bytes.Equal(b, src) {
					t.Errorf("%s: %s differs from layer %d's", kind, name, l-2)
				}
				same++
			}
			if rest, ok := strings.CutPrefix(name, layer(0)); ok && !strings.Contains(rest, "norm") {
				if bytes.Equal(b, byName[layer(1)+rest]) {
					t.Errorf("%s: %s equals layer 1's", kind, name)
				}
				differ++
			}
		}
		if same == 0 || differ == 0 {
			t.Errorf("%s: %d repeated and %d distinct tensors checked", kind, same, differ)
		}
	}
	ts, err := m.SafetensorsTensors()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string][]byte{}
	for _, x := range ts {
		byName[x.Name] = x.Data
	}
	if _, ok := byName["model.layers.3.mlp.switch_mlp.down_proj.biases"]; !ok || len(byName) != len(ts) {
		t.Fatalf("safetensors: %d tensors, %d names, no layer-3 expert biases", len(ts), len(byName))
	}
	check("safetensors", byName, func(l int) string { return fmt.Sprintf("model.layers.%d.", l) })

	o.Format, o.Quantize, o.GGUFType = FormatGGUF, 0, "q8_0"
	out := filepath.Join(t.TempDir(), "m")
	if _, err := Create(out, o); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(GGUFPath(out), gguf.LoadRead)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byName = map[string][]byte{}
	for _, x := range f.Tensors {
		byName[x.Name] = x.Data
	}
	if x, ok := f.Tensor("blk.3.ffn_down_exps.weight"); !ok || x.DType != tensor.Q8_0 {
		t.Fatalf("gguf: blk.3.ffn_down_exps.weight %v %v", ok, x.DType)
	}
	check("gguf", byName, func(l int) string { return fmt.Sprintf("blk.%d.", l) })
}

func mustBuild(t *testing.T, o Options) *Model {
	t.Helper()
	m, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestDeterministic(t *testing.T) {
	encode := func(o Options) []byte {
		ts, err := mustBuild(t, o).SafetensorsTensors()
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := safetensors.Write(&b, ts, nil); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	a, b := encode(Options{Seed: 3, Quantize: 4}), encode(Options{Seed: 3, Quantize: 4})
	if !bytes.Equal(a, b) {
		t.Error("same seed, different weights")
	}
	if bytes.Equal(a, encode(Options{Seed: 4, Quantize: 4})) {
		t.Error("different seeds, same weights")
	}
}

// TestRoundTrip writes demo models and reads them back with our reader in
// both load modes: the config parses to the options, float weights come
// back bit for bit, and quantized weights are exactly what the MLX
// quantizer makes of the float originals and dequantize to within a step.
func TestRoundTrip(t *testing.T) {
	tests := []Options{
		{},
		{Arch: "llama", DType: "f16", Untied: true, Seed: 1},
		{Arch: "qwen3", DType: "f32", Quantize: 8, GroupSize: 32, Seed: 2},
		{Arch: "llama", Quantize: 4, GroupSize: 64, Untied: true, Seed: 3},
		{Quantize: 4, GroupSize: 128, Seed: 4}, // only down_proj (in = 128) is quantized
		{Quantize: 3, GroupSize: 32, Layers: 1, Seed: 5},
	}
	for _, o := range tests {
		name := fmt.Sprintf("%s/%s/q%d/g%d", o.Arch, o.DType, o.Quantize, o.GroupSize)
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			m, err := Create(dir, o)
			if err != nil {
				t.Fatal(err)
			}
			for _, mode := range []safetensors.LoadMode{safetensors.LoadRead, safetensors.LoadMmap} {
				checkModel(t, dir, m, mode)
			}
		})
	}
}

func checkModel(t *testing.T, dir string, m *Model, mode safetensors.LoadMode) {
	t.Helper()
	mf, err := modelfile.Open(dir, modelfile.Options{LoadMode: mode})
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	c, p, o := mf.Config, m.Params, m.Options
	if c.Architecture != p.Arch || c.HiddenSize != p.Hidden || c.NumHiddenLayers != p.Layers || c.NumAttentionHeads != p.Heads ||
		c.NumKeyValueHeads != p.KVHeads || c.HeadDim != p.HeadDim || c.IntermediateSize != p.Intermediate || c.VocabSize != p.Vocab ||
		c.TieWordEmbeddings != p.TieEmbeddings || c.RopeTheta != p.RopeTheta || c.RMSNormEps != p.RMSNormEps {
		t.Errorf("config %+v does not match params %+v", c, p)
	}
	if (o.Quantize != 0) != (c.Quantization != nil) || (c.Quantization != nil && (c.Quantization.Bits != o.Quantize || c.Quantization.GroupSize != o.GroupSize)) {
		t.Errorf("quantization %+v, options %d/%d", c.Quantization, o.Quantize, o.GroupSize)
	}
	if got := mf.EOSTokenIDs(); !slices.Equal(got, m.Tokenizer.EOSIDs) {
		t.Errorf("EOS ids %v, want %v", got, m.Tokenizer.EOSIDs)
	}
	ts, _ := m.SafetensorsTensors()
	var bytesWant int64
	var names []string
	for _, x := range ts {
		bytesWant += int64(len(x.Data))
		names = append(names, x.Name)
	}
	slices.Sort(names)
	if mf.Weights.Bytes() != bytesWant || !slices.Equal(mf.Weights.Names(), names) {
		t.Errorf("weights: %d bytes, names %v; want %d, %v", mf.Weights.Bytes(), mf.Weights.Names(), bytesWant, names)
	}
	for _, want := range m.Tensors {
		if len(want.Shape) == 1 {
			got, _ := mf.Weights.Tensor(want.Name)
			vals, err := modelfile.ToFloat32(got)
			if err != nil || !slices.Equal(vals, want.Data) || got.DType != m.DType {
				t.Errorf("%s: %v %v", want.Name, got.DType, err)
			}
			continue
		}
		path := strings.TrimSuffix(want.Name, ".weight")
		l, err := mf.Linear(path)
		if err != nil {
			t.Fatal(err)
		}
		if l.Out != int(want.Shape[0]) || l.In != int(want.Shape[1]) {
			t.Fatalf("%s: [%d, %d], want %v", path, l.Out, l.In, want.Shape)
		}
		vals, err := l.Dequantize()
		if err != nil {
			t.Fatal(err)
		}
		if _, _, _, q := m.quantParams(want); l.Quantized != q {
			t.Fatalf("%s: quantized = %v", path, l.Quantized)
		}
		if !l.Quantized {
			if !slices.Equal(vals, want.Data) {
				t.Errorf("%s: float values differ", path)
			}
			continue
		}
		packed, _, _, _ := modelfile.QuantizeAffine(want.Data, l.Out, l.In, o.GroupSize, o.Quantize)
		for i, w := range packed {
			if binary.LittleEndian.Uint32(l.Weight.Data[4*i:]) != w {
				t.Fatalf("%s: packed word %d differs from the quantizer's", path, i)
			}
		}
		scales, _ := modelfile.ToFloat32(l.Scales)
		for i := range vals {
			step := float64(abs(scales[i/o.GroupSize]))
			if d := math.Abs(float64(vals[i] - want.Data[i])); d > 1.5*step {
				t.Fatalf("%s: value %d = %v dequantizes to %v (step %v)", path, i, want.Data[i], vals[i], step)
			}
		}
	}
}

func abs(f float32) float32 { return float32(math.Abs(float64(f))) }

func TestWriteFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := Create(dir, Options{Quantize: 4}); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		if info, _ := e.Info(); info.Mode().Perm() != 0o644 {
			t.Errorf("%s has mode %v", e.Name(), info.Mode())
		}
	}
	want := []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}
	if !slices.Equal(names, want) {
		t.Errorf("files %v, want %v", names, want)
	}
	f, err := safetensors.Open(filepath.Join(dir, "model.safetensors"), safetensors.LoadRead)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if md := f.Metadata(); !reflect.DeepEqual(md, map[string]string{"format": "mlx"}) {
		t.Errorf("metadata %v", md)
	}
	ts := f.Tensors()
	if ts[0].DType != tensor.U32 || ts[len(ts)-1].DType != tensor.BF16 {
		t.Errorf("tensors not in the Python library's order (U32 before BF16): %v ... %v", ts[0].DType, ts[len(ts)-1].DType)
	}
	if _, err := Create(filepath.Join(dir, "config.json", "x"), Options{}); err == nil {
		t.Error("writing under a file succeeded")
	}
	var pe *os.PathError
	if _, err := Create(filepath.Join(dir, "config.json", "x"), Options{}); !errors.As(err, &pe) {
		t.Errorf("error %v does not carry the path", err)
	}
}
