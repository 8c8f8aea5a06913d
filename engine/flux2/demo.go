package flux2

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"fusion/engine/demo"
	"fusion/engine/modelfile"
	"fusion/engine/safetensors"
	"fusion/engine/tensor"
)

// DemoOptions describe a random-weight FLUX.2 [klein] checkpoint.
type DemoOptions struct {
	Seed  uint64
	DType string // "f32" (default) or "bf16"
	// Quantize is the bits of MLX affine quantization of the transformer's
	// linear layers (0: float); GroupSize its group size. Layers whose
	// input width is not a multiple of the group size stay float (as
	// mlx's quantize predicate leaves them), scales and biases are in
	// DType, and transformer/config.json carries the quantization block.
	Quantize, GroupSize int
	Transformer         TransformerConfig
	VAE                 VAEConfig
	// TextEncoder is the Qwen3 text encoder (engine/demo options). The
	// pipeline stacks the hidden states after layers 9, 18 and 27, so it
	// needs at least 27 layers; joint_attention_dim is 3·its hidden size.
	TextEncoder demo.Options
}

// TinyDemo is the configuration the parity tests use: one double- and
// one single-stream block of 2 heads of 16, a 4-level VAE of 8–16
// channels with 4 latent channels (64×64 pixels are 4×4 image tokens),
// and a 28-layer Qwen3 of width 16.
func TinyDemo() DemoOptions {
	te := demo.Options{Arch: modelfile.ArchQwen3, Layers: 28, Hidden: 16, Heads: 2, KVHeads: 1, HeadDim: 8, Intermediate: 32, DType: "f32"}
	return DemoOptions{
		DType: "f32",
		Transformer: TransformerConfig{
			ClassName: "Flux2Transformer2DModel", PatchSize: 1, InChannels: 16, NumLayers: 1, NumSingleLayers: 1,
			AttentionHeadDim: 16, NumAttentionHeads: 2, JointAttentionDim: 3 * te.Hidden, TimestepGuidanceChannels: 32,
			MLPRatio: 3, AxesDimsRoPE: []int{4, 4, 4, 4}, RoPETheta: 2000, Eps: 1e-6,
		},
		VAE: VAEConfig{
			ClassName: "AutoencoderKLFlux2", InChannels: 3, OutChannels: 3,
			DownBlockTypes:   []string{"DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D"},
			UpBlockTypes:     []string{"UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D"},
			BlockOutChannels: []int{8, 8, 16, 16}, LayersPerBlock: 1, ActFn: "silu", LatentChannels: 4, NormNumGroups: 4,
			SampleSize: 64, UseQuantConv: true, UsePostQuantConv: true, MidBlockAddAttention: true,
			BatchNormEps: 1e-4, BatchNormMomentum: 0.1, PatchSize: [2]int{2, 2},
		},
		TextEncoder: te,
	}
}

// check rejects configurations the pipeline or our writer cannot use.
func (o DemoOptions) check() error {
	t, v := o.Transformer, o.VAE
	sum := 0
	for _, d := range t.AxesDimsRoPE {
		sum += d
	}
	switch {
	case o.DType != "f32" && o.DType != "bf16":
		return fmt.Errorf("flux2: dtype %q (f32 or bf16)", o.DType)
	case o.Quantize != 0 && modelfile.CheckAffine(o.GroupSize, o.Quantize) != nil:
		return fmt.Errorf("flux2: %w", modelfile.CheckAffine(o.GroupSize, o.Quantize))
	case o.Quantize != 0 && t.Inner()%o.GroupSize != 0:
		// The single blocks' to_out is split at the inner width.
		return fmt.Errorf("flux2: the transformer's width %d is not a multiple of the group size %d", t.Inner(), o.GroupSize)
	case t.PatchSize != 1:
		return fmt.Errorf("flux2: patch_size %d (FLUX.2 uses 1)", t.PatchSize)
	case t.NumAttentionHeads <= 0 || t.AttentionHeadDim <= 0 || t.NumLayers < 0 || t.NumSingleLayers < 0:
		return fmt.Errorf("flux2: transformer sizes must be positive")
	case sum != t.AttentionHeadDim:
		return fmt.Errorf("flux2: axes_dims_rope %v do not add up to the head width %d", t.AxesDimsRoPE, t.AttentionHeadDim)
	case t.TimestepGuidanceChannels%2 != 0:
		return fmt.Errorf("flux2: timestep_guidance_channels %d is odd", t.TimestepGuidanceChannels)
	case t.InChannels != 4*v.LatentChannels:
		return fmt.Errorf("flux2: in_channels %d is not 4 × the VAE's %d latent channels", t.InChannels, v.LatentChannels)
	case t.JointAttentionDim != 3*o.TextEncoder.Hidden:
		return fmt.Errorf("flux2: joint_attention_dim %d is not 3 × the text encoder's width %d", t.JointAttentionDim, o.TextEncoder.Hidden)
	case o.TextEncoder.Layers < 27:
		return fmt.Errorf("flux2: the text encoder has %d layers, the pipeline reads layer 27", o.TextEncoder.Layers)
	case len(v.BlockOutChannels) == 0 || len(v.BlockOutChannels) != len(v.DownBlockTypes) || len(v.UpBlockTypes) != len(v.decoderChannels()):
		return fmt.Errorf("flux2: VAE block lists do not match")
	}
	for _, c := range append(append([]int{}, v.BlockOutChannels...), v.decoderChannels()...) {
		if v.NormNumGroups <= 0 || c%v.NormNumGroups != 0 {
			return fmt.Errorf("flux2: VAE width %d is not a multiple of %d groups", c, v.NormNumGroups)
		}
	}
	return nil
}

// CreateDemo writes a random-weight FLUX.2 [klein] checkpoint into dir in
// diffusers' layout: model_index.json, scheduler/, transformer/ and vae/
// (config.json and diffusion_pytorch_model.safetensors), text_encoder/ (a
// Qwen3ForCausalLM from engine/demo) and tokenizer/ (its tokenizer).
// Weights are deterministic for a seed.
func CreateDemo(dir string, o DemoOptions) error {
	if err := o.check(); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x464c5558))
	te := o.TextEncoder
	te.Seed = o.Seed
	if o.DType == "bf16" {
		te.DType = "bf16"
	}
	teDir := filepath.Join(dir, TextEncoderDir)
	if _, err := demo.Create(teDir, te); err != nil {
		return fmt.Errorf("flux2: text encoder: %w", err)
	}
	// The tokenizer is its own component.
	if err := os.MkdirAll(filepath.Join(dir, TokenizerDir), 0o755); err != nil {
		return fmt.Errorf("flux2: %w", err)
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if err := os.Rename(filepath.Join(teDir, f), filepath.Join(dir, TokenizerDir, f)); err != nil {
			return fmt.Errorf("flux2: tokenizer: %w", err)
		}
	}
	files := []struct {
		path string
		v    any
	}{
		{ModelIndexFile, KleinIndex(true)},
		{SchedulerConfigFile, DefaultSchedulerConfig()},
		{filepath.Join(TransformerDir, ComponentConfig), o.transformerConfig()},
		{filepath.Join(VAEDir, ComponentConfig), o.VAE},
	}
	for _, f := range files {
		if err := writeJSON(filepath.Join(dir, f.path), f.v); err != nil {
			return err
		}
	}
	for _, c := range []struct {
		dir          string
		w            *weights
		bits, groups int
	}{
		{TransformerDir, transformerWeights(o.Transformer, rng), o.Quantize, o.GroupSize},
		{VAEDir, vaeWeights(o.VAE, rng), 0, 0},
	} {
		ts, err := c.w.tensors(o.DType, c.bits, c.groups)
		if err != nil {
			return err
		}
		if err := safetensors.WriteFile(filepath.Join(dir, c.dir, ComponentWeights), ts, map[string]string{"format": "pt"}); err != nil {
			return fmt.Errorf("flux2: %s: %w", c.dir, err)
		}
	}
	return nil
}

// transformerConfig is the transformer's config.json, with the
// quantization block of a quantized demo.
func (o DemoOptions) transformerConfig() TransformerConfig {
	c := o.Transformer
	if o.Quantize != 0 {
		c.Quantization, _ = json.Marshal(map[string]int{"group_size": o.GroupSize, "bits": o.Quantize})
	}
	return c
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("flux2: %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("flux2: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("flux2: %w", err)
	}
	return nil
}

// weights collects named random tensors.
type weights struct {
	rng  *rand.Rand
	list []param
}

type param struct {
	name  string
	shape []int64
	data  []float32
	i64   bool // bn.num_batches_tracked
}

// normal adds a tensor of N(mean, std²) values.
func (w *weights) normal(name string, mean, std float64, shape ...int64) {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	d := make([]float32, n)
	for i := range d {
		d[i] = float32(mean + std*w.rng.NormFloat64())
	}
	w.list = append(w.list, param{name: name, shape: shape, data: d})
}

// linear adds a [out, in] weight scaled by 1/√in, and a bias if asked.
func (w *weights) linear(name string, out, in int, bias bool) {
	w.normal(name+".weight", 0, 1/math.Sqrt(float64(in)), int64(out), int64(in))
	if bias {
		w.normal(name+".bias", 0, 0.05, int64(out))
	}
}

// conv adds a [out, in, k, k] convolution with its bias.
func (w *weights) conv(name string, out, in, k int) {
	w.normal(name+".weight", 0, 1/math.Sqrt(float64(in*k*k)), int64(out), int64(in), int64(k), int64(k))
	w.normal(name+".bias", 0, 0.05, int64(out))
}

// norm adds a norm's scale near 1 and, for group norms, its shift.
func (w *weights) norm(name string, n int, bias bool) {
	w.normal(name+".weight", 1, 0.1, int64(n))
	if bias {
		w.normal(name+".bias", 0, 0.05, int64(n))
	}
}

// tensors encodes the weights in dtype; with bits ≠ 0 every matrix whose
// input width is a multiple of group is MLX affine quantized (its values
// first rounded to dtype, as a model in that dtype would be): name.weight
// the packed codes, name.scales and name.biases in dtype.
func (w *weights) tensors(dtype string, bits, group int) ([]tensor.Tensor, error) {
	out := make([]tensor.Tensor, 0, len(w.list))
	floats := func(name string, shape []int64, data []float32) tensor.Tensor {
		t := tensor.Tensor{Name: name, Shape: shape}
		if dtype == "bf16" {
			t.DType, t.Data = tensor.BF16, make([]byte, 2*len(data))
			for i, v := range data {
				binary.LittleEndian.PutUint16(t.Data[2*i:], tensor.F32ToBF16(v))
			}
			return t
		}
		t.DType, t.Data = tensor.F32, make([]byte, 4*len(data))
		for i, v := range data {
			binary.LittleEndian.PutUint32(t.Data[4*i:], math.Float32bits(v))
		}
		return t
	}
	for _, p := range w.list {
		switch {
		case p.i64:
			out = append(out, tensor.Tensor{Name: p.name, Shape: p.shape, DType: tensor.I64, Data: make([]byte, 8)})
		case bits != 0 && len(p.shape) == 2 && p.shape[1]%int64(group) == 0 && strings.HasSuffix(p.name, ".weight"):
			rows, cols := int(p.shape[0]), int(p.shape[1])
			vals := p.data
			if dtype == "bf16" {
				vals = make([]float32, len(p.data))
				for i, v := range p.data {
					vals[i] = tensor.BF16ToF32(tensor.F32ToBF16(v))
				}
			}
			packed, scales, biases, err := modelfile.QuantizeAffine(vals, rows, cols, group, bits)
			if err != nil {
				return nil, fmt.Errorf("flux2: %s: %w", p.name, err)
			}
			codes := tensor.Tensor{Name: p.name, DType: tensor.U32, Shape: []int64{int64(rows), int64(modelfile.PackedCols(cols, bits))},
				Data: make([]byte, 4*len(packed))}
			for i, v := range packed {
				binary.LittleEndian.PutUint32(codes.Data[4*i:], v)
			}
			module := strings.TrimSuffix(p.name, ".weight")
			groups := []int64{int64(rows), int64(cols / group)}
			out = append(out, codes, floats(module+".scales", groups, scales), floats(module+".biases", groups, biases))
		default:
			out = append(out, floats(p.name, p.shape, p.data))
		}
	}
	safetensors.SortLikePython(out)
	return out, nil
}

// transformerWeights names the tensors of Flux2Transformer2DModel (no
// biases anywhere; RMSNorm scales on q and k per head).
func transformerWeights(c TransformerConfig, rng *rand.Rand) *weights {
	w := &weights{rng: rng}
	d, ff, hd := c.Inner(), c.MLPHidden(), c.AttentionHeadDim
	w.linear("time_guidance_embed.timestep_embedder.linear_1", d, c.TimestepGuidanceChannels, false)
	w.linear("time_guidance_embed.timestep_embedder.linear_2", d, d, false)
	if c.GuidanceEmbeds {
		w.linear("time_guidance_embed.guidance_embedder.linear_1", d, c.TimestepGuidanceChannels, false)
		w.linear("time_guidance_embed.guidance_embedder.linear_2", d, d, false)
	}
	w.linear("double_stream_modulation_img.linear", 6*d, d, false)
	w.linear("double_stream_modulation_txt.linear", 6*d, d, false)
	w.linear("single_stream_modulation.linear", 3*d, d, false)
	w.linear("x_embedder", d, c.InChannels, false)
	w.linear("context_embedder", d, c.JointAttentionDim, false)
	for i := 0; i < c.NumLayers; i++ {
		p := fmt.Sprintf("transformer_blocks.%d.", i)
		for _, n := range []string{"attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out"} {
			w.linear(p+n, d, d, false)
		}
		for _, n := range []string{"attn.norm_q", "attn.norm_k", "attn.norm_added_q", "attn.norm_added_k"} {
			w.norm(p+n, hd, false)
		}
		for _, n := range []string{"ff", "ff_context"} {
			w.linear(p+n+".linear_in", 2*ff, d, false)
			w.linear(p+n+".linear_out", d, ff, false)
		}
	}
	for i := 0; i < c.NumSingleLayers; i++ {
		p := fmt.Sprintf("single_transformer_blocks.%d.attn.", i)
		w.linear(p+"to_qkv_mlp_proj", 3*d+2*ff, d, false)
		w.norm(p+"norm_q", hd, false)
		w.norm(p+"norm_k", hd, false)
		w.linear(p+"to_out", d, d+ff, false)
	}
	w.linear("norm_out.linear", 2*d, d, false)
	w.linear("proj_out", c.PatchSize*c.PatchSize*c.Out(), d, false)
	return w
}

// vaeWeights names the tensors of AutoencoderKLFlux2: the encoder (which
// from_pretrained expects even though generation only decodes), the
// decoder, the 1×1 quant convolutions and the latent batch norm's
// running statistics.
func vaeWeights(c VAEConfig, rng *rand.Rand) *weights {
	w := &weights{rng: rng}
	resnet := func(p string, in, out int) {
		w.norm(p+"norm1", in, true)
		w.conv(p+"conv1", out, in, 3)
		w.norm(p+"norm2", out, true)
		w.conv(p+"conv2", out, out, 3)
		if in != out {
			w.conv(p+"conv_shortcut", out, in, 1)
		}
	}
	mid := func(p string, ch int) {
		if c.MidBlockAddAttention {
			w.norm(p+"attentions.0.group_norm", ch, true)
			for _, n := range []string{"to_q", "to_k", "to_v", "to_out.0"} {
				w.linear(p+"attentions.0."+n, ch, ch, true)
			}
		}
		resnet(p+"resnets.0.", ch, ch)
		resnet(p+"resnets.1.", ch, ch)
	}
	// stage writes each block's resnets and the resampling convolution
	// between blocks (the encoder's downsamplers, the decoder's upsamplers).
	stage := func(blocks, sampler string, chans []int, resnets int) {
		prev := chans[0]
		for i, out := range chans {
			for j := 0; j < resnets; j++ {
				in := out
				if j == 0 {
					in = prev
				}
				resnet(fmt.Sprintf("%s.%d.resnets.%d.", blocks, i, j), in, out)
			}
			if i < len(chans)-1 {
				w.conv(fmt.Sprintf("%s.%d.%s.0.conv", blocks, i, sampler), out, out, 3)
			}
			prev = out
		}
	}
	enc := c.BlockOutChannels
	w.conv("encoder.conv_in", enc[0], c.InChannels, 3)
	stage("encoder.down_blocks", "downsamplers", enc, c.LayersPerBlock)
	last := enc[len(enc)-1]
	mid("encoder.mid_block.", last)
	w.norm("encoder.conv_norm_out", last, true)
	w.conv("encoder.conv_out", 2*c.LatentChannels, last, 3)

	dec := c.decoderChannels()
	rev := make([]int, len(dec))
	for i, ch := range dec {
		rev[len(dec)-1-i] = ch
	}
	w.conv("decoder.conv_in", rev[0], c.LatentChannels, 3)
	mid("decoder.mid_block.", rev[0])
	// The decoder's blocks have one resnet more than the encoder's.
	stage("decoder.up_blocks", "upsamplers", rev, c.LayersPerBlock+1)
	w.norm("decoder.conv_norm_out", rev[len(rev)-1], true)
	w.conv("decoder.conv_out", c.OutChannels, rev[len(rev)-1], 3)
	if c.UseQuantConv {
		w.conv("quant_conv", 2*c.LatentChannels, 2*c.LatentChannels, 1)
	}
	if c.UsePostQuantConv {
		w.conv("post_quant_conv", c.LatentChannels, c.LatentChannels, 1)
	}
	bn := int64(c.PatchSize[0] * c.PatchSize[1] * c.LatentChannels)
	w.normal("bn.running_mean", 0, 0.1, bn)
	w.normal("bn.running_var", 0, 0.2, bn)
	for i, v := range w.list[len(w.list)-1].data {
		w.list[len(w.list)-1].data[i] = 1 + float32(math.Abs(float64(v)))
	}
	w.list = append(w.list, param{name: "bn.num_batches_tracked", shape: []int64{}, i64: true})
	return w
}
