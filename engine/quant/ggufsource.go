package quant

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"fusion/engine/gguf"
	"fusion/engine/modelfile"
	"fusion/engine/safetensors"
	"fusion/engine/tensor"
)

// A GGUF source is a float (F32, F16, BF16) GGUF file of an architecture
// engine/gguf maps back to Hugging Face names. oQ expands it into a
// hidden float model directory beside the destination — the layout a
// safetensors source has: config.json from the GGUF metadata,
// tokenizer.json synthesised from tokenizer.ggml.*, tokenizer_config.json
// and generation_config.json with the special tokens and chat template,
// model.safetensors with each tensor's bytes under its Hugging Face name
// (Q/K rows of llama un-permuted back to rotate-half order) — quantizes
// that directory as any other source, and removes it.

// ggufClasses are config.json's architectures entries of the GGUF
// architectures a source may have (general.architecture → class).
var ggufClasses = map[string]string{
	"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
	"qwen3": "Qwen3ForCausalLM", "qwen3moe": "Qwen3MoeForCausalLM",
}

// IsGGUF reports whether path names a GGUF file (a regular file ending in
// .gguf), which Quantize reads as a GGUF source.
func IsGGUF(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && strings.EqualFold(filepath.Ext(path), ".gguf")
}

// ggufTensor is one tensor of the expanded directory.
type ggufTensor struct {
	hf    string        // Hugging Face name
	t     tensor.Tensor // as stored in the GGUF file
	heads int           // > 0: un-permute its rows for this many heads
}

// ggufExpansion is what a GGUF source expands to, checked before any
// weight byte is read.
type ggufExpansion struct {
	f       *gguf.File
	name    string         // the model's name: the file's, without .gguf
	config  map[string]any // config.json
	files   map[string]any // tokenizer_config.json, generation_config.json
	tensors []ggufTensor
}

// openGGUF opens a GGUF source and plans its expansion; ErrUnsupported
// says why it cannot be one (a quantized file, an architecture or
// tensor without a Hugging Face mapping, an unknown tokenizer).
func openGGUF(path string) (*ggufExpansion, error) {
	f, err := gguf.Open(path, gguf.LoadMmap)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	e := &ggufExpansion{f: f, name: strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))}
	if err := e.plan(); err != nil {
		f.Close()
		return nil, err
	}
	return e, nil
}

func (e *ggufExpansion) plan() error {
	f := e.f
	arch := f.Architecture()
	class, ok := ggufClasses[arch]
	if !ok {
		return fmt.Errorf("%w: GGUF architecture %q (a GGUF source may be llama, qwen2, qwen3 or qwen3moe)", ErrUnsupported, arch)
	}
	mc, err := f.ModelConfig()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	dtype := tensor.Invalid
	attnBias := false
	for _, t := range f.Tensors {
		switch t.DType {
		case tensor.F32, tensor.F16, tensor.BF16:
		default:
			return fmt.Errorf("%w: %s is %v: re-quantizing a quantized model loses accuracy; give its float original (an F16, BF16 or F32 GGUF or safetensors)",
				ErrUnsupported, t.Name, t.DType)
		}
		hf, ok := gguf.HFName(t.Name)
		if !ok {
			if t.Name == "rope_freqs.weight" {
				return fmt.Errorf("%w: rope_freqs.weight (Llama 3 rope scaling) in a GGUF source: its config cannot be recovered", ErrUnsupported)
			}
			return fmt.Errorf("%w: GGUF tensor %s has no Hugging Face name here", ErrUnsupported, t.Name)
		}
		if len(t.Shape) >= 2 && dtype == tensor.Invalid || t.Name == "token_embd.weight" {
			dtype = t.DType
		}
		heads := 0
		if gguf.NeedsQKPermute(arch) {
			switch {
			case strings.HasSuffix(hf, ".self_attn.q_proj.weight"), strings.HasSuffix(hf, ".self_attn.q_proj.bias"):
				heads = mc.NumAttentionHeads
			case strings.HasSuffix(hf, ".self_attn.k_proj.weight"), strings.HasSuffix(hf, ".self_attn.k_proj.bias"):
				heads = mc.NumKeyValueHeads
			}
		}
		attnBias = attnBias || strings.HasSuffix(hf, ".self_attn.q_proj.bias")
		e.tensors = append(e.tensors, ggufTensor{hf: hf, t: t, heads: heads})
	}
	if len(e.tensors) == 0 {
		return fmt.Errorf("%w: the GGUF file has no tensors", ErrUnsupported)
	}
	if e.config, err = ggufConfigJSON(f, mc, class, dtype, attnBias); err != nil {
		return err
	}
	return e.tokenizerFiles()
}

// ggufConfigJSON is config.json of a GGUF source: gguf.ModelConfig's
// fields (already named as config.json names them), the class, the
// dtype, the special token ids, a mixture's keys and a linear or YaRN
// rope scaling.
func ggufConfigJSON(f *gguf.File, mc gguf.ModelConfig, class string, dtype tensor.DType, attnBias bool) (map[string]any, error) {
	b, err := json.Marshal(mc)
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	if mc.MaxPositionEmbeddings == 0 {
		delete(c, "max_position_embeddings")
	}
	c["architectures"] = []string{class}
	c["torch_dtype"] = map[tensor.DType]string{tensor.F32: "float32", tensor.F16: "float16", tensor.BF16: "bfloat16"}[dtype]
	if attnBias && mc.ModelType == modelfile.ArchLlama {
		c["attention_bias"] = true
	}
	if id, ok := f.BOS(); ok {
		c["bos_token_id"] = id
	}
	if id, ok := f.EOS(); ok {
		c["eos_token_id"] = id
	}
	if mc.Experts > 0 {
		// llama.cpp has no decoder_sparse_step: a layer without a router
		// is dense; its qwen3moe graph renormalizes the top k unless the
		// file says otherwise.
		dense := []int{}
		for l := range mc.NumHiddenLayers {
			if _, ok := f.Tensor(fmt.Sprintf("blk.%d.ffn_gate_inp.weight", l)); !ok {
				dense = append(dense, l)
			}
		}
		c["decoder_sparse_step"], c["mlp_only_layers"] = 1, dense
		c["norm_topk_prob"] = mc.NormTopK == nil || *mc.NormTopK
	}
	key := func(s string) string { return gguf.ArchKey(f.Architecture(), "rope.scaling."+s) }
	switch typ, _ := f.Meta(key("type")).AsString(); typ {
	case "", "none":
	case "linear", "yarn":
		factor, _ := f.Meta(key("factor")).AsFloat64()
		s := map[string]any{"rope_type": typ, "factor": factor}
		if n, ok := f.Meta(key("original_context_length")).AsInt64(); ok {
			s["original_max_position_embeddings"] = n
		}
		c["rope_scaling"] = s
	default:
		return nil, fmt.Errorf("%w: rope scaling %q in a GGUF source", ErrUnsupported, typ)
	}
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	if _, err := modelfile.ParseConfig(raw); err != nil {
		return nil, fmt.Errorf("%w: the GGUF metadata makes no valid config: %v", ErrUnsupported, err)
	}
	return c, nil
}

// tokenizerFiles fills e.files with the JSON files beside tokenizer.json
// (which write synthesises): the special tokens as texts and ids, whether
// BOS is added, the chat template.
func (e *ggufExpansion) tokenizerFiles() error {
	f := e.f
	if _, err := f.TokenizerJSON(); err != nil {
		return fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	tokens, _ := f.Meta(gguf.KeyTokens).AsStrings()
	text := func(id int, ok bool) any {
		if !ok || id >= len(tokens) {
			return nil
		}
		return tokens[id]
	}
	tc := map[string]any{"bos_token": text(f.BOS()), "eos_token": text(f.EOS())}
	if add, ok := f.Meta(gguf.KeyAddBOS).AsBool(); ok {
		tc["add_bos_token"] = add
	}
	if t := f.ChatTemplate(); t != "" {
		tc["chat_template"] = t
	}
	gc := map[string]any{}
	if id, ok := f.BOS(); ok {
		gc["bos_token_id"] = id
	}
	if ids := f.StopTokens(); len(ids) > 0 {
		gc["eos_token_id"] = ids
	}
	e.files = map[string]any{"tokenizer_config.json": tc, "generation_config.json": gc}
	return nil
}

// write puts the expanded model into dir (which exists and is empty).
// ctx ends it between tensors.
func (e *ggufExpansion) write(ctx context.Context, dir string) error {
	tok, err := e.f.TokenizerJSON()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tok, 0o644); err != nil {
		return fmt.Errorf("quant: %w", err)
	}
	for name, v := range e.files {
		if err := writeJSON(filepath.Join(dir, name), v); err != nil {
			return err
		}
	}
	if err := writeJSON(filepath.Join(dir, modelfile.ConfigFile), e.config); err != nil {
		return err
	}
	out := make([]tensor.Tensor, 0, len(e.tensors))
	for _, gt := range e.tensors {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		t := gt.t
		if gt.heads > 0 {
			if t, err = gguf.UnpermuteQK(t, gt.heads); err != nil {
				return fmt.Errorf("%w: %v", ErrUnsupported, err)
			}
		}
		t.Name = gt.hf
		out = append(out, t)
	}
	safetensors.SortLikePython(out)
	if err := safetensors.WriteFile(filepath.Join(dir, modelfile.SingleWeightsFile), out, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("quant: %w", err)
	}
	return nil
}

// expandGGUF writes the GGUF source at path as a float model directory
// in a hidden staging directory under parent, named after the file (the
// name a GGUF output's general.name takes). remove deletes it.
func expandGGUF(ctx context.Context, path, parent string, logf func(string, ...any)) (dir string, remove func(), err error) {
	e, err := openGGUF(path)
	if err != nil {
		return "", nil, err
	}
	defer e.f.Close()
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", nil, fmt.Errorf("quant: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".oq-gguf-source-")
	if err != nil {
		return "", nil, fmt.Errorf("quant: %w", err)
	}
	remove = func() { os.RemoveAll(tmp) }
	dir = filepath.Join(tmp, e.name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		remove()
		return "", nil, fmt.Errorf("quant: %w", err)
	}
	logf("reading the GGUF source %s (%d tensors) as a float model directory", filepath.Base(path), len(e.tensors))
	if err := e.write(ctx, dir); err != nil {
		remove()
		return "", nil, err
	}
	return dir, remove, nil
}

// checkGGUF is CheckSource and CheckGGUFSource of a GGUF file: its
// expansion is planned and its config checked against archs, without
// reading weights.
func checkGGUF(path string, archs []string, export bool) error {
	e, err := openGGUF(path)
	if err != nil {
		return err
	}
	defer e.f.Close()
	raw, err := json.Marshal(e.config)
	if err != nil {
		return fmt.Errorf("quant: %w", err)
	}
	cfg, err := modelfile.ParseConfig(raw)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	if !slices.Contains(archs, cfg.Architecture) {
		return fmt.Errorf("%w: architecture %q (oQ takes %s)", ErrUnsupported, cfg.Architecture, strings.Join(archs, ", "))
	}
	if export {
		_, err = ggufSupported(cfg)
	}
	return err
}

// quantizeGGUFSource is Quantize of a GGUF source: checked, expanded
// beside the destination, quantized, the expansion removed.
func quantizeGGUFSource(ctx context.Context, src, dst string, o Options) (Result, error) {
	export := o.Format == FormatGGUF
	archs, out := architectures, dst
	if export {
		archs, out = ggufArchitectures, GGUFPath(dst)
	}
	if err := checkGGUF(src, archs, export); err != nil {
		return Result{}, err
	}
	if _, err := os.Stat(out); err == nil {
		return Result{}, fmt.Errorf("%w: %s", ErrExists, out)
	}
	logf := func(format string, args ...any) {
		if o.Log != nil {
			o.Log(fmt.Sprintf(format, args...))
		}
	}
	dir, remove, err := expandGGUF(ctx, src, filepath.Dir(filepath.Clean(out)), logf)
	if err != nil {
		return Result{}, err
	}
	defer remove()
	return Quantize(ctx, dir, dst, o)
}
