package demo

import (
	"fmt"

	"fusion/engine/modelfile"
	"fusion/engine/tensor"
)

// Output formats.
const (
	FormatSafetensors = "safetensors"
	FormatGGUF        = "gguf"
)

// Options describe the model to build. Zero fields take the defaults of
// DefaultOptions.
type Options struct {
	Arch         string // one of archList
	Layers       int
	Hidden       int
	Heads        int
	KVHeads      int
	HeadDim      int    // 0: Hidden/Heads
	Intermediate int    //
	VocabFrom    string // directory of a real tokenizer to copy (tokenizer.json, or a vocab.gguf); "" for the built-in one
	// TemplateFrom is a chat template to write instead of the tokenizer's:
	// a .jinja file, or a directory whose default template is taken (a
	// real model's, with the built-in or another vocabulary). "" keeps
	// the tokenizer's (the built-in one's is Qwen3's kind, Qwen3.5's for
	// qwen3_5 and qwen3_5_moe: template.go).
	TemplateFrom string
	Quantize     int // 0 (float), or MLX affine bits: 2, 3, 4, 5, 6, 8
	GroupSize    int // quantization group size: 32, 64 or 128
	// QuantMode is MLX's quantization mode: "" or "affine" (with Quantize
	// and GroupSize), or "mxfp4", "mxfp8", "nvfp4", which fix the bits and
	// group size.
	QuantMode string
	DType     string // "bf16", "f16" or "f32"
	Format    string // "safetensors" or "gguf"
	GGUFType  string // GGUF weight layout (f32, f16, bf16, q8_0, q4_0, q3_k, q4_k, q5_k, q6_k, q2_k, q3_k_m, q4_k_m, q5_k_m); "" derives it from Quantize and DType
	Seed      uint64
	Untied    bool // write a separate lm_head instead of tying it to the embedding
	// StopAfter, when positive, makes the model end its answers on its own
	// after about that many tokens (see stop.go); 0 leaves the end tokens
	// as unlikely as padding, so answers run to max_tokens.
	StopAfter int
	// Mixture of experts (qwen3_moe): Experts experts of MoEIntermediate
	// features, ExpertsPerTok per token, in every SparseStep-th layer (the
	// others dense). Zero fields take DefaultMoE's values.
	Experts, ExpertsPerTok, MoEIntermediate, SparseStep int
	// SlidingWindow and SlidingPattern (gemma3_text): the local layers'
	// window and one global layer in every SlidingPattern (defaults 512
	// and 6, Gemma 3 1B's). mistral, mistral3 and ministral3 take them too (no
	// window by default; pattern 4), written as layer_types.
	SlidingWindow, SlidingPattern int
	// PartialRotary (phi3) is partial_rotary_factor, the share of each
	// head RoPE rotates (default 0.75, Phi-4-mini's).
	PartialRotary float64
	// GlobalHeadDim (gemma4_text) is global_head_dim, the head width of
	// the full-attention layers (default 2·HeadDim, Gemma 4 E2B/E4B's
	// 512 beside 256; HeadDim for one width).
	GlobalHeadDim int
	// Multimodal (gemma3_text, gemma4_text) writes the vision-language
	// checkpoint mlx-community ships: model_type gemma3 or gemma4, the
	// text config as text_config, the text weights under
	// "language_model." beside a tiny vision tower (multimodal.go).
	Multimodal bool
	// DistinctLayers, when positive, draws the weights of the first
	// DistinctLayers layers only: layer l ≥ DistinctLayers takes the
	// values of layer l mod DistinctLayers. The files still hold every
	// layer's own bytes, so a deep model streams as much per token as one
	// with distinct values; building it holds (and quantizes) the float
	// weights of DistinctLayers layers (for benchmarks: Qwen3-30B-A3B's
	// layers are ~2.5 GB each in float32). llama, mistral, qwen3 and
	// qwen3_moe, without StopAfter; 0: every layer its own.
	DistinctLayers int
}

// archList names the architectures the demo writes.
const archList = "llama, qwen3, qwen3_moe, gemma3_text, gemma4_text, phi3, mistral, mistral3, ministral3, gpt_oss, deepseek_v3, glm4_moe, qwen3_next, qwen3_5 or qwen3_5_moe"

// DefaultMoE is the demo mixture: 8 experts of 64 features, 2 per token,
// every layer sparse (Qwen3-30B-A3B has 128 of 768, 8 per token).
func DefaultMoE() (experts, perTok, intermediate, sparseStep int) { return 8, 2, 64, 1 }

// DefaultOptions is a tiny Qwen3: 2 layers, hidden 64, 4 heads, 2 KV
// heads, intermediate 128, bf16, unquantized.
func DefaultOptions() Options {
	return Options{
		Arch: modelfile.ArchQwen3, Layers: 2, Hidden: 64, Heads: 4, KVHeads: 2, Intermediate: 128,
		GroupSize: 64, DType: "bf16", Format: FormatSafetensors,
	}
}

// resolve fills defaults and checks the options.
func (o Options) resolve() (Options, error) {
	d := DefaultOptions()
	if o.Arch == "" {
		o.Arch = d.Arch
	}
	for _, f := range []struct {
		v   *int
		def int
	}{{&o.Layers, d.Layers}, {&o.Hidden, d.Hidden}, {&o.Heads, d.Heads}, {&o.Intermediate, d.Intermediate}, {&o.GroupSize, d.GroupSize}} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if o.KVHeads == 0 {
		o.KVHeads = min(d.KVHeads, o.Heads)
	}
	if o.DType == "" {
		o.DType = d.DType
	}
	if o.Format == "" {
		o.Format = d.Format
	}
	if err := o.resolveGemma(); err != nil {
		return o, err
	}
	if err := o.resolveFamily(); err != nil {
		return o, err
	}
	if err := o.resolveMultimodal(); err != nil {
		return o, err
	}
	if err := o.resolveDeepseek(); err != nil {
		return o, err
	}
	switch {
	case o.Layers < 0 || o.Hidden < 0 || o.Heads < 0 || o.KVHeads < 0 || o.HeadDim < 0 || o.Intermediate < 0 || o.GlobalHeadDim < 0:
		return o, fmt.Errorf("demo: sizes must be positive")
	case o.GlobalHeadDim != 0 && o.Arch != modelfile.ArchGemma4Text:
		return o, fmt.Errorf("demo: --global-head-dim is gemma4_text's")
	case o.GlobalHeadDim%2 != 0:
		return o, fmt.Errorf("demo: --global-head-dim %d is odd", o.GlobalHeadDim)
	case o.StopAfter < 0 || o.StopAfter > MaxStopAfter:
		return o, fmt.Errorf("demo: --stop-after %d is outside 0..%d", o.StopAfter, MaxStopAfter)
	case o.Hidden <= reservedDims:
		return o, fmt.Errorf("demo: --hidden %d is too small (at least %d)", o.Hidden, reservedDims+1)
	case o.Heads%o.KVHeads != 0:
		return o, fmt.Errorf("demo: --kv-heads %d does not divide --heads %d", o.KVHeads, o.Heads)
	case o.HeadDim == 0 && o.Hidden%o.Heads != 0:
		return o, fmt.Errorf("demo: --heads %d does not divide --hidden %d (or give --head-dim)", o.Heads, o.Hidden)
	}
	if o.HeadDim == 0 {
		o.HeadDim = o.Hidden / o.Heads
	}
	if o.Arch == modelfile.ArchGemma4Text && o.GlobalHeadDim == 0 {
		o.GlobalHeadDim = 2 * o.HeadDim
	}
	if _, err := o.dtype(); err != nil {
		return o, err
	}
	if f, ok := tensor.FP(o.QuantMode); ok {
		if o.Format == FormatGGUF {
			return o, fmt.Errorf("demo: --quant %s is MLX's, not GGUF's", o.QuantMode)
		}
		o.Quantize, o.GroupSize = f.Bits, f.Group
	} else if o.QuantMode != "" && o.QuantMode != modelfile.ModeAffine {
		return o, fmt.Errorf("demo: unknown --quant %q (want affine, mxfp4, mxfp8 or nvfp4)", o.QuantMode)
	} else if o.Quantize != 0 {
		o.QuantMode = modelfile.ModeAffine
	}
	if o.Quantize != 0 {
		if err := modelfile.CheckQuant(o.QuantMode, o.GroupSize, o.Quantize); err != nil {
			return o, fmt.Errorf("demo: %w", err)
		}
	}
	switch o.Arch {
	case modelfile.ArchLlama, modelfile.ArchQwen3, modelfile.ArchGemma3Text, modelfile.ArchPhi3, modelfile.ArchMistral, modelfile.ArchMistral3, modelfile.ArchMinistral3, modelfile.ArchQwen35:
		if o.Experts != 0 || o.ExpertsPerTok != 0 || o.MoEIntermediate != 0 || o.SparseStep != 0 {
			return o, fmt.Errorf("demo: --experts, --experts-per-tok, --moe-intermediate and --sparse-step need a mixture (--arch %s, %s, %s or %s)", modelfile.ArchQwen3MoE, modelfile.ArchGptOss, modelfile.ArchDeepseekV3, modelfile.ArchGlm4MoE)
		}
	case modelfile.ArchGemma4Text: // resolveGemma4: the mixture is optional
	case modelfile.ArchQwen3MoE, modelfile.ArchGptOss, modelfile.ArchDeepseekV3, modelfile.ArchGlm4MoE, modelfile.ArchQwen3Next, modelfile.ArchQwen35MoE:
		if err := o.resolveMoE(); err != nil {
			return o, err
		}
	default:
		return o, fmt.Errorf("demo: unknown arch %q (want %s)", o.Arch, archList)
	}
	if o.Format != FormatSafetensors && o.Format != FormatGGUF {
		return o, fmt.Errorf("demo: unknown format %q (want safetensors or gguf)", o.Format)
	}
	if err := o.checkDistinctLayers(); err != nil {
		return o, err
	}
	if o.Format == FormatGGUF {
		if _, err := o.ggufType(); err != nil {
			return o, err
		}
	} else if o.GGUFType != "" {
		return o, fmt.Errorf("demo: --gguf-type needs --format gguf")
	}
	return o, nil
}

// checkDistinctLayers checks DistinctLayers: 0, or 1..Layers for the
// families whose layers init.go draws in its plain loop.
func (o Options) checkDistinctLayers() error {
	switch {
	case o.DistinctLayers == 0:
		return nil
	case o.DistinctLayers < 0 || o.DistinctLayers > o.Layers:
		return fmt.Errorf("demo: distinct layers %d is outside 1..%d (the layers)", o.DistinctLayers, o.Layers)
	case o.StopAfter > 0:
		// The clock edits layer 0's attention, which later layers
		// would share.
		return fmt.Errorf("demo: distinct layers and --stop-after do not go together")
	}
	switch o.Arch {
	case modelfile.ArchLlama, modelfile.ArchMistral, modelfile.ArchQwen3, modelfile.ArchQwen3MoE:
		return nil
	}
	return fmt.Errorf("demo: distinct layers are for llama, mistral, qwen3 and qwen3_moe, not %s", o.Arch)
}

// resolveMoE fills and checks the mixture's options.
func (o *Options) resolveMoE() error {
	e, k, inter, step := DefaultMoE()
	for _, f := range []struct {
		v   *int
		def int
	}{{&o.Experts, e}, {&o.ExpertsPerTok, k}, {&o.MoEIntermediate, inter}, {&o.SparseStep, step}} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	switch {
	case o.Experts < 0 || o.ExpertsPerTok < 0 || o.MoEIntermediate < 0 || o.SparseStep < 0:
		return fmt.Errorf("demo: expert sizes must be positive")
	case o.ExpertsPerTok > o.Experts:
		return fmt.Errorf("demo: --experts-per-tok %d exceeds --experts %d", o.ExpertsPerTok, o.Experts)
	case o.Format == FormatGGUF && o.Arch != modelfile.ArchQwen3MoE && o.Arch != modelfile.ArchGptOss:
		return fmt.Errorf("demo: %s is written as safetensors only", o.Arch)
	case o.Format == FormatGGUF && o.Arch == modelfile.ArchGptOss && (o.Hidden%32 != 0 || o.MoEIntermediate%32 != 0):
		return fmt.Errorf("demo: a gpt_oss GGUF stores its experts in MXFP4 blocks of 32: --hidden %d and --moe-intermediate %d must be multiples of 32", o.Hidden, o.MoEIntermediate)
	case o.Quantize != 0 && o.Format != FormatGGUF && o.Hidden%routerGroup != 0:
		// mlx-lm quantizes Qwen3-MoE's router at 8 bits in groups of 64.
		return fmt.Errorf("demo: quantized %s needs --hidden a multiple of %d (the router's group)", o.Arch, routerGroup)
	}
	return nil
}
