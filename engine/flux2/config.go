package flux2

import (
	"encoding/json"
	"fmt"
	"iter"
	"math"
	"os"
)

// The diffusers folder layout of a FLUX.2 [klein] checkpoint:
// model_index.json names one class per component folder.
const (
	ModelIndexFile      = "model_index.json"
	SchedulerConfigFile = "scheduler/scheduler_config.json"
	TransformerDir      = "transformer"
	VAEDir              = "vae"
	TextEncoderDir      = "text_encoder"
	TokenizerDir        = "tokenizer"
	// ComponentWeights is a component's single weights file; large
	// checkpoints shard it (…-00001-of-0000N.safetensors with an
	// index.json), as transformers does.
	ComponentWeights = "diffusion_pytorch_model.safetensors"
	ComponentConfig  = "config.json"
)

// ModelIndex is model_index.json of a Flux2KleinPipeline.
type ModelIndex struct {
	ClassName        string    `json:"_class_name"`
	DiffusersVersion string    `json:"_diffusers_version"`
	IsDistilled      bool      `json:"is_distilled"`
	Scheduler        [2]string `json:"scheduler"`
	TextEncoder      [2]string `json:"text_encoder"`
	Tokenizer        [2]string `json:"tokenizer"`
	Transformer      [2]string `json:"transformer"`
	VAE              [2]string `json:"vae"`
}

// KleinIndex is the model index of a FLUX.2 [klein] checkpoint.
func KleinIndex(distilled bool) ModelIndex {
	return ModelIndex{
		ClassName:        "Flux2KleinPipeline",
		DiffusersVersion: "0.42.1",
		IsDistilled:      distilled,
		Scheduler:        [2]string{"diffusers", "FlowMatchEulerDiscreteScheduler"},
		TextEncoder:      [2]string{"transformers", "Qwen3ForCausalLM"},
		Tokenizer:        [2]string{"transformers", "Qwen2TokenizerFast"},
		Transformer:      [2]string{"diffusers", "Flux2Transformer2DModel"},
		VAE:              [2]string{"diffusers", "AutoencoderKLFlux2"},
	}
}

// TransformerConfig is transformer/config.json of a
// Flux2Transformer2DModel.
type TransformerConfig struct {
	ClassName                string  `json:"_class_name"`
	PatchSize                int     `json:"patch_size"`
	InChannels               int     `json:"in_channels"`
	OutChannels              *int    `json:"out_channels"`
	NumLayers                int     `json:"num_layers"`
	NumSingleLayers          int     `json:"num_single_layers"`
	AttentionHeadDim         int     `json:"attention_head_dim"`
	NumAttentionHeads        int     `json:"num_attention_heads"`
	JointAttentionDim        int     `json:"joint_attention_dim"`
	TimestepGuidanceChannels int     `json:"timestep_guidance_channels"`
	MLPRatio                 float64 `json:"mlp_ratio"`
	AxesDimsRoPE             []int   `json:"axes_dims_rope"`
	RoPETheta                int     `json:"rope_theta"`
	Eps                      float64 `json:"eps"`
	GuidanceEmbeds           bool    `json:"guidance_embeds"`
	// Quantization is the MLX affine quantization block of a quantized
	// transformer (mlx-lm's: group_size, bits; a module is quantized when
	// its .scales exist), absent for float weights.
	Quantization json.RawMessage `json:"quantization,omitempty"`
}

// Inner is the width of the transformer's residual stream.
func (c TransformerConfig) Inner() int { return c.NumAttentionHeads * c.AttentionHeadDim }

// MLPHidden is the width of the feed-forward layers (int(inner·ratio)).
func (c TransformerConfig) MLPHidden() int { return int(float64(c.Inner()) * c.MLPRatio) }

// Out is the number of output channels (in_channels unless set).
func (c TransformerConfig) Out() int {
	if c.OutChannels != nil {
		return *c.OutChannels
	}
	return c.InChannels
}

// VAEConfig is vae/config.json of an AutoencoderKLFlux2.
type VAEConfig struct {
	ClassName            string   `json:"_class_name"`
	InChannels           int      `json:"in_channels"`
	OutChannels          int      `json:"out_channels"`
	DownBlockTypes       []string `json:"down_block_types"`
	UpBlockTypes         []string `json:"up_block_types"`
	BlockOutChannels     []int    `json:"block_out_channels"`
	DecoderBlockOutChans []int    `json:"decoder_block_out_channels"`
	LayersPerBlock       int      `json:"layers_per_block"`
	ActFn                string   `json:"act_fn"`
	LatentChannels       int      `json:"latent_channels"`
	NormNumGroups        int      `json:"norm_num_groups"`
	SampleSize           int      `json:"sample_size"`
	UseQuantConv         bool     `json:"use_quant_conv"`
	UsePostQuantConv     bool     `json:"use_post_quant_conv"`
	MidBlockAddAttention bool     `json:"mid_block_add_attention"`
	BatchNormEps         float64  `json:"batch_norm_eps"`
	BatchNormMomentum    float64  `json:"batch_norm_momentum"`
	PatchSize            [2]int   `json:"patch_size"`
}

// ScaleFactor is the VAE's downsampling factor, 2^(blocks−1) (the
// pipeline's vae_scale_factor).
func (c VAEConfig) ScaleFactor() int { return 1 << (len(c.BlockOutChannels) - 1) }

// decoderChannels is the decoder's block widths, outermost first
// (decoder_block_out_channels, else block_out_channels).
func (c VAEConfig) decoderChannels() []int {
	if len(c.DecoderBlockOutChans) > 0 {
		return c.DecoderBlockOutChans
	}
	return c.BlockOutChannels
}

// readJSON reads the JSON file at path (model_index.json, a component's
// config.json, the scheduler's config) into v.
func readJSON(path string, v any) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("flux2: %w", err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("flux2: %s: %w", path, err)
	}
	return nil
}

// DecodeBytes estimates the VAE decoder's peak working memory for one
// width×height image, in float32 bytes: the largest of its pieces, each
// counted with every array it makes (they live until the piece ends, see
// VAE.Decode) — a resnet at its resolution (x, both norms and SiLUs, both
// convolutions, the shortcut, the sum), the mid block's attention (its
// arrays and one head's score matrix over all latent pixels), an
// upsampling (the input, the doubled image, the convolution) and the
// output convolution. At large sizes the attention's scores (the latent
// pixels squared) or the last up block's resnets at full resolution
// dominate. A size whose estimate overflows is math.MaxInt64.
func (c VAEConfig) DecodeBytes(width, height int) int64 {
	dec := c.decoderChannels()
	if len(dec) == 0 || width <= 0 || height <= 0 {
		return 0
	}
	s := int64(c.ScaleFactor())
	px := (int64(width) / s) * (int64(height) / s) // pixels at the latent resolution
	if px > 1<<28 {
		return math.MaxInt64
	}
	resnet := func(px, in, out int64) int64 {
		n := 3*in + 5*out
		if in != out {
			n += out
		}
		return n * px
	}
	prev := int64(dec[len(dec)-1]) // the innermost width: the mid block's
	peak := resnet(px, prev, prev)
	if c.MidBlockAddAttention {
		peak = max(peak, 7*prev*px+px*px)
	}
	for p := range c.upPieces(px) {
		if p.upsample {
			peak = max(peak, p.out*p.px+2*p.out*4*p.px)
		} else {
			peak = max(peak, resnet(p.px, p.in, p.out))
		}
	}
	px <<= 2 * (len(dec) - 1) // the output resolution
	peak = max(peak, (3*int64(dec[0])+int64(c.OutChannels))*px)
	return 4 * peak
}

// upPiece is a resnet (in → out channels) or an upsampling (out
// channels, doubling each side) of the decoder's up blocks, run on px
// input pixels.
type upPiece struct {
	upsample    bool
	px, in, out int64
}

// upPieces yields the decoder's up blocks piece by piece, innermost
// first (as they run), from px pixels at the latent resolution:
// layers_per_block + 1 resnets a block, the first from the previous
// block's width, then an upsampling but in the last block.
func (c VAEConfig) upPieces(px int64) iter.Seq[upPiece] {
	return func(yield func(upPiece) bool) {
		dec := c.decoderChannels()
		prev := int64(dec[len(dec)-1])
		for i := len(dec) - 1; i >= 0; i-- {
			ch := int64(dec[i])
			for j := 0; j <= c.LayersPerBlock; j++ {
				in := ch
				if j == 0 {
					in = prev
				}
				if !yield(upPiece{px: px, in: in, out: ch}) {
					return
				}
			}
			if i > 0 {
				if !yield(upPiece{upsample: true, px: px, in: ch, out: ch}) {
					return
				}
				px *= 4
			}
			prev = ch
		}
	}
}
