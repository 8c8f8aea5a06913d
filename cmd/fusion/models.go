package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"fusion/engine/demo"
	"fusion/engine/modelfile"
	"fusion/engine/safetensors"
)

func modelsCommands() map[string]command {
	return map[string]command{
		"create-demo": {summary: "write a random-weight demo model (fusion models create-demo -h)", run: runCreateDemo},
		"inspect": {summary: "DIR: print a model directory's architecture, dims, quantization, tensor count and weight bytes as JSON",
			run: runInspect},
		"bench": {summary: "MODEL: a node benchmarks a model's throughput or (--accuracy) accuracy as a job, on one, several or --each node (fusion models bench -h)",
			run: runModelsBench},
		"pull": {summary: "OWNER/NAME: download a model from the Hugging Face Hub (fusion models pull -h)", run: runPull},
		"quantize": {summary: "SRC DST: oQ, quantize a float model to MLX affine weights, uniform or mixed precision (fusion models quantize -h)",
			run: runQuantize},
	}
}

func runCreateDemo(_ context.Context, args []string, stdout, stderr io.Writer) error {
	d := demo.DefaultOptions()
	var o demo.Options
	var out string
	fs := newFlagSet("models create-demo", stderr)
	fs.StringVar(&o.Arch, "arch", d.Arch, "architecture: llama, qwen3, qwen3_moe, gemma3_text, gemma4_text, phi3, mistral, mistral3, ministral3, gpt_oss, deepseek_v3, glm4_moe, qwen3_next, qwen3_5 or qwen3_5_moe; flux2 writes a tiny FLUX.2 [klein] image checkpoint in the diffusers layout (only --seed, --dtype f32|bf16 and --quantize/--group-size, the transformer's MLX affine bits, apply)")
	fs.StringVar(&out, "out", "", "output directory (required)")
	fs.IntVar(&o.Layers, "layers", d.Layers, "number of layers")
	fs.IntVar(&o.Hidden, "hidden", d.Hidden, "hidden size")
	fs.IntVar(&o.Heads, "heads", d.Heads, "attention heads")
	fs.IntVar(&o.KVHeads, "kv-heads", d.KVHeads, "key/value heads")
	fs.IntVar(&o.HeadDim, "head-dim", 0, "head dimension (default hidden/heads; deepseek_v3: qk_nope_head_dim and v_head_dim)")
	fs.IntVar(&o.Intermediate, "intermediate", d.Intermediate, "MLP intermediate size")
	fs.StringVar(&o.VocabFrom, "vocab-from", "", "copy tokenizer.json and tokenizer_config.json from this directory (default: a built-in byte-level BPE tokenizer)")
	fs.StringVar(&o.TemplateFrom, "template-from", "", "write this chat template (a .jinja file, or a model directory's) instead of the tokenizer's")
	fs.IntVar(&o.Quantize, "quantize", 0, "MLX affine quantization bits: 0 (none), 4 or 8 (also 2, 3, 5, 6)")
	fs.IntVar(&o.GroupSize, "group-size", d.GroupSize, "quantization group size: 32, 64 or 128")
	fs.StringVar(&o.QuantMode, "quant", "", "MLX quantization mode: affine (with --quantize bits), or mxfp4, mxfp8, nvfp4 (bits and group size fixed by the mode)")
	fs.StringVar(&o.DType, "dtype", d.DType, "weight dtype: bf16, f16 or f32")
	fs.StringVar(&o.Format, "format", d.Format, "output format: safetensors (a model directory) or gguf (one file: --out, with .gguf appended if missing)")
	fs.StringVar(&o.GGUFType, "gguf-type", "", "GGUF weight layout: f32, f16, bf16, q8_0, q4_0, q3_k, q4_k, q5_k, q6_k, or a llama.cpp mix q2_k, q3_k_m, q4_k_m, q5_k_m (default: from --quantize 8/4 or --dtype)")
	fs.Uint64Var(&o.Seed, "seed", 0, "random seed (same seed, same weights)")
	fs.BoolVar(&o.Untied, "untied", false, "write a separate lm_head instead of tying it to the embeddings")
	fs.IntVar(&o.StopAfter, "stop-after", 0, fmt.Sprintf("end answers on their own after about this many tokens (0: never, answers run to max_tokens; at most %d)", demo.MaxStopAfter))
	e, k, inter, step := demo.DefaultMoE()
	fs.IntVar(&o.Experts, "experts", 0, fmt.Sprintf("qwen3_moe, gpt_oss, deepseek_v3, glm4_moe, qwen3_next, qwen3_5_moe, gemma4_text (optional there): number of experts (default %d)", e))
	fs.IntVar(&o.ExpertsPerTok, "experts-per-tok", 0, fmt.Sprintf("qwen3_moe, gpt_oss, deepseek_v3, glm4_moe, qwen3_next, qwen3_5_moe, gemma4_text (optional there): experts per token (default %d)", k))
	fs.IntVar(&o.MoEIntermediate, "moe-intermediate", 0, fmt.Sprintf("qwen3_moe, gpt_oss, deepseek_v3, glm4_moe, qwen3_next, qwen3_5_moe, gemma4_text (optional there): intermediate size of one expert (default %d)", inter))
	fs.IntVar(&o.SparseStep, "sparse-step", 0, fmt.Sprintf("qwen3_moe: every n-th layer has experts, the others a dense MLP (default %d)", step))
	fs.IntVar(&o.SlidingWindow, "sliding-window", 0, "gemma3_text, gemma4_text: positions a local layer attends to (default 512); gpt_oss: the same (default 128); mistral, mistral3, ministral3: the same, as layer_types (default: no window)")
	fs.IntVar(&o.SlidingPattern, "sliding-pattern", 0, "gemma3_text: one global layer in every N (default 6; gemma4_text: 2; mistral, mistral3, ministral3: 4)")
	fs.Float64Var(&o.PartialRotary, "partial-rotary", 0, "phi3: partial_rotary_factor, the share of each head RoPE rotates (default 0.75)")
	fs.BoolVar(&o.Multimodal, "multimodal", false, "gemma3_text, gemma4_text: write the vision-language checkpoint mlx-community ships (model_type gemma3/gemma4, text_config, weights under language_model., a tiny vision tower neither mlx-lm nor fusion loads)")
	fs.IntVar(&o.GlobalHeadDim, "global-head-dim", 0, "gemma4_text: global_head_dim, the head width of the full-attention layers (default 2×head-dim, as Gemma 4 E2B/E4B's 512 beside 256)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if out == "" {
		return usagef("--out is required")
	}
	if o.Arch == flux2Arch {
		return createFlux2Demo(out, o, fs, stdout)
	}
	m, err := demo.Create(out, o)
	if err != nil {
		return err
	}
	p := m.Params
	quant := "float"
	if m.Options.Quantize != 0 {
		quant = fmt.Sprintf("%s %d-bit, group %d", m.Options.QuantMode, m.Options.Quantize, m.Options.GroupSize)
	}
	if m.Options.Format == demo.FormatGGUF {
		out = demo.GGUFPath(out)
		quant, _ = m.Options.GGUFLayout()
	}
	moe := ""
	if p.Experts > 0 {
		moe = fmt.Sprintf(", %d experts of %d (%d per token)", p.Experts, p.MoEIntermediate, p.ExpertsPerTok)
	}
	fmt.Fprintf(stdout, "wrote %s: %s, %d layers, hidden %d, %d/%d heads, head_dim %d, intermediate %d%s, vocab %d, %s %s\n",
		out, p.Arch, p.Layers, p.Hidden, p.Heads, p.KVHeads, p.HeadDim, p.Intermediate, moe, p.Vocab, m.Options.DType, quant)
	return nil
}

// inspectReport is what `fusion models inspect` prints.
type inspectReport struct {
	Dir               string                  `json:"dir"`
	Architecture      string                  `json:"architecture"`
	Architectures     []string                `json:"architectures"`
	Dims              inspectDims             `json:"dims"`
	RMSNormEps        float64                 `json:"rms_norm_eps"`
	RopeTheta         float64                 `json:"rope_theta"`
	RopeScaling       *modelfile.RopeScaling  `json:"rope_scaling"`
	TieWordEmbeddings bool                    `json:"tie_word_embeddings"`
	TorchDType        string                  `json:"torch_dtype,omitempty"`
	Quantization      *modelfile.Quantization `json:"quantization"`
	BOSTokenIDs       []int                   `json:"bos_token_ids"`
	EOSTokenIDs       []int                   `json:"eos_token_ids"`
	Tensors           int                     `json:"tensors"`
	WeightBytes       int64                   `json:"weight_bytes"`
	Files             []string                `json:"files"`
	LoadMode          string                  `json:"load_mode"`
}

type inspectDims struct {
	HiddenSize            int `json:"hidden_size"`
	IntermediateSize      int `json:"intermediate_size"`
	NumHiddenLayers       int `json:"num_hidden_layers"`
	NumAttentionHeads     int `json:"num_attention_heads"`
	NumKeyValueHeads      int `json:"num_key_value_heads"`
	HeadDim               int `json:"head_dim"`
	VocabSize             int `json:"vocab_size"`
	MaxPositionEmbeddings int `json:"max_position_embeddings"`
}

func runInspect(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("models inspect", stderr)
	mode := fs.String("load-mode", "", "how to load weights: read or mmap (default "+safetensors.DefaultLoadMode.String()+")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("usage: fusion models inspect [--load-mode read|mmap] DIR")
	}
	lm, err := safetensors.ParseLoadMode(*mode)
	if err != nil {
		return usagef("%v", err)
	}
	dir := fs.Arg(0)
	if st, err := os.Stat(dir); err == nil && !st.IsDir() && strings.EqualFold(filepath.Ext(dir), ".gguf") {
		return errors.New("inspecting GGUF files is not supported yet")
	}
	m, err := modelfile.Open(dir, modelfile.Options{LoadMode: lm})
	if err != nil {
		return err
	}
	defer m.Close()
	c := m.Config
	r := inspectReport{
		Dir: dir, Architecture: c.Architecture, Architectures: c.Architectures,
		Dims: inspectDims{c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers, c.NumAttentionHeads, c.NumKeyValueHeads,
			c.HeadDim, c.VocabSize, c.MaxPositionEmbeddings},
		RMSNormEps: c.RMSNormEps, RopeTheta: c.RopeTheta, RopeScaling: c.RopeScaling, TieWordEmbeddings: c.TieWordEmbeddings,
		TorchDType: c.TorchDType, Quantization: c.Quantization, BOSTokenIDs: c.BOSTokenIDs, EOSTokenIDs: m.EOSTokenIDs(),
		Tensors: m.Weights.Len(), WeightBytes: m.Weights.Bytes(), LoadMode: m.Weights.Mode().String(),
	}
	for _, f := range m.Weights.Files() {
		r.Files = append(r.Files, filepath.Base(f))
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
