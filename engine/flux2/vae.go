package flux2

import (
	"context"
	"fmt"
	"image"
	"math"
	"path/filepath"

	"fusion/engine/backend"
	"fusion/engine/tensor"
)

// VAE is the decoder half of diffusers' AutoencoderKLFlux2 on a compute
// backend, with the latent batch norm's statistics the pipeline
// de-normalizes with. Images are arrays [h·w, channels] (backend.ImageOps);
// 1×1 convolutions are Linear layers.
type VAE struct {
	cfg VAEConfig
	params

	bnMean, bnStd []float32 // per patchified channel: running_mean, √(running_var + eps)
	postQuant     backend.Weight
	convIn        backend.Weight
	midFirst      resnet
	midAttn       *vaeAttention // nil without mid_block_add_attention
	midSecond     resnet
	up            []upBlock
	normOut       groupNorm
	convOut       backend.Weight
}

// groupNorm is a GroupNorm's affine weights.
type groupNorm struct{ w, b backend.Vector }

// resnet is a ResnetBlock2D without a time embedding.
type resnet struct {
	norm1, norm2 groupNorm
	conv1, conv2 backend.Weight // 3×3
	shortcut     backend.Weight // 1×1, when the width changes; else nil
}

// vaeAttention is the mid block's one-head attention over the pixels.
type vaeAttention struct {
	norm           groupNorm
	q, k, v, toOut backend.Weight
}

// upBlock is an UpDecoderBlock2D: resnets, then (but in the last block)
// nearest 2× upsampling and a 3×3 convolution.
type upBlock struct {
	resnets  []resnet
	upsample backend.Weight
}

// LoadVAE reads vae/config.json and the decoder's weights of a checkpoint
// directory and uploads them to be (the encoder's are not read). Close
// releases them.
func LoadVAE(be backend.Backend, dir string) (*VAE, error) {
	var cfg VAEConfig
	if err := readJSON(filepath.Join(dir, VAEDir, ComponentConfig), &cfg); err != nil {
		return nil, err
	}
	chans := cfg.decoderChannels()
	switch {
	case cfg.ActFn != "silu" || cfg.PatchSize != [2]int{2, 2} || cfg.LatentChannels <= 0 || cfg.LayersPerBlock <= 0:
		return nil, fmt.Errorf("flux2: unsupported VAE config (act %q, patch %v, %d latent channels, %d layers per block)",
			cfg.ActFn, cfg.PatchSize, cfg.LatentChannels, cfg.LayersPerBlock)
	case len(chans) == 0 || len(cfg.UpBlockTypes) != len(chans):
		return nil, fmt.Errorf("flux2: VAE has %d up blocks for %d widths", len(cfg.UpBlockTypes), len(chans))
	}
	for _, t := range cfg.UpBlockTypes {
		if t != "UpDecoderBlock2D" {
			return nil, fmt.Errorf("flux2: VAE up block %q is not supported", t)
		}
	}
	for _, c := range chans {
		if cfg.NormNumGroups <= 0 || c%cfg.NormNumGroups != 0 {
			return nil, fmt.Errorf("flux2: VAE width %d is not a multiple of %d groups", c, cfg.NormNumGroups)
		}
	}
	v := &VAE{cfg: cfg}
	if err := v.open(be, dir, VAEDir, v.load); err != nil {
		return nil, err
	}
	return v, nil
}

// Config is the VAE's configuration.
func (v *VAE) Config() VAEConfig { return v.cfg }

// Close releases the weights and closes the file.
func (v *VAE) Close() error { return v.close() }

// load uploads the decoder's weights, in diffusers' module order.
func (v *VAE) load() error {
	c := v.cfg
	l := loader{m: &v.params}
	if err := v.loadBatchNorm(&l); err != nil {
		return err
	}
	if c.UsePostQuantConv {
		v.postQuant = l.conv("post_quant_conv")
	}
	v.convIn = l.conv("decoder.conv_in")
	v.midFirst = l.resnet("decoder.mid_block.resnets.0.")
	if c.MidBlockAddAttention {
		p := "decoder.mid_block.attentions.0."
		v.midAttn = &vaeAttention{norm: l.groupNorm(p + "group_norm"),
			q: l.biased(p + "to_q"), k: l.biased(p + "to_k"), v: l.biased(p + "to_v"), toOut: l.biased(p + "to_out.0")}
	}
	v.midSecond = l.resnet("decoder.mid_block.resnets.1.")
	n := len(c.decoderChannels())
	for i := range n {
		var b upBlock
		for j := 0; j <= c.LayersPerBlock; j++ {
			b.resnets = append(b.resnets, l.resnet(fmt.Sprintf("decoder.up_blocks.%d.resnets.%d.", i, j)))
		}
		if i < n-1 {
			b.upsample = l.conv(fmt.Sprintf("decoder.up_blocks.%d.upsamplers.0.conv", i))
		}
		v.up = append(v.up, b)
	}
	v.normOut = l.groupNorm("decoder.conv_norm_out")
	v.convOut = l.conv("decoder.conv_out")
	return l.err
}

// loadBatchNorm reads the latent batch norm's running statistics.
func (v *VAE) loadBatchNorm(l *loader) error {
	n := 4 * v.cfg.LatentChannels
	read := func(name string) ([]float32, error) {
		t, ok := l.tensor(name)
		if !ok {
			return nil, l.err
		}
		x, err := tensor.Floats(t)
		if err != nil || len(x) != n {
			return nil, fmt.Errorf("flux2: VAE %s: %d values (%v), want %d", name, len(x), err, n)
		}
		return x, nil
	}
	mean, err := read("bn.running_mean")
	if err != nil {
		return err
	}
	variance, err := read("bn.running_var")
	if err != nil {
		return err
	}
	// torch: sqrt(running_var + eps) in float32.
	eps := float32(v.cfg.BatchNormEps)
	v.bnMean, v.bnStd = mean, make([]float32, n)
	for i, x := range variance {
		v.bnStd[i] = float32(math.Sqrt(float64(x + eps)))
	}
	return nil
}

// conv uploads name.weight [Out, C, k, k] and name.bias as a Conv2D
// weight (a Linear one for k = 1).
func (l *loader) conv(name string) backend.Weight {
	w, ok := l.tensor(name + ".weight")
	if !ok {
		return nil
	}
	b, ok := l.tensor(name + ".bias")
	if !ok {
		return nil
	}
	if len(w.Shape) != 4 || w.Shape[2] != w.Shape[3] {
		l.err = fmt.Errorf("flux2: %s has shape %v, not a square 2-D convolution", w.Name, w.Shape)
		return nil
	}
	d, err := backend.ConvData(name, w, &b)
	if err != nil {
		l.err = fmt.Errorf("flux2: %w", err)
		return nil
	}
	return l.upload(d)
}

// biased uploads name.weight with its bias name.bias.
func (l *loader) biased(name string) backend.Weight {
	w := l.matrix(name)
	b, ok := l.tensor(name + ".bias")
	if !ok {
		return nil
	}
	w.Bias = &b
	return l.upload(w)
}

func (l *loader) groupNorm(name string) groupNorm {
	return groupNorm{w: l.vector(name), b: l.vectorOf(name + ".bias")}
}

func (l *loader) resnet(p string) resnet {
	r := resnet{norm1: l.groupNorm(p + "norm1"), conv1: l.conv(p + "conv1"), norm2: l.groupNorm(p + "norm2"), conv2: l.conv(p + "conv2")}
	if _, ok := l.m.file.Tensor(p + "conv_shortcut.weight"); ok {
		r.shortcut = l.conv(p + "conv_shortcut")
	}
	return r
}

// Denormalize undoes the latent batch norm on unpacked, still patchified
// latents [4·latent_channels, h, w], in place: x·√(var + eps) + mean per
// channel, as the pipeline does before unpatchifying.
func (v *VAE) Denormalize(l Latents) error {
	if l.C != len(v.bnMean) || len(l.Data) != l.C*l.H*l.W {
		return fmt.Errorf("flux2: denormalize [%d, %d, %d] latents with %d statistics", l.C, l.H, l.W, len(v.bnMean))
	}
	n := l.H * l.W
	for c := range l.C {
		for i, x := range l.Data[c*n : (c+1)*n] {
			l.Data[c*n+i] = float32(x*v.bnStd[c]) + v.bnMean[c] // two roundings, as torch's mul then add
		}
	}
	return nil
}

// Decode runs the decoder on unpatchified latents [latent_channels, H, W]
// (post_quant_conv, conv_in, the mid block, the up blocks, conv_norm_out,
// SiLU, conv_out) and returns the image it makes, pixels row-major with
// the out_channels (RGB) side by side, [height·width, 3], values about
// −1 … 1, with height = H·ScaleFactor() and width likewise.
func (v *VAE) Decode(ctx context.Context, l Latents) (pixels []float32, height, width int, err error) {
	if l.C != v.cfg.LatentChannels || l.H <= 0 || l.W <= 0 || len(l.Data) != l.C*l.H*l.W {
		return nil, 0, 0, fmt.Errorf("flux2: decode [%d, %d, %d] latents, the VAE takes %d channels", l.C, l.H, l.W, v.cfg.LatentChannels)
	}
	s := v.be.NewStep(ctx)
	defer s.Close()
	h, w := l.H, l.W
	// Channels last: pixel (y, x) is row y·w+x.
	hwc := make([]float32, len(l.Data))
	for c := range l.C {
		for p := range h * w {
			hwc[p*l.C+c] = l.Data[c*h*w+p]
		}
	}
	x := s.Input(h*w, l.C, hwc)
	if v.postQuant != nil {
		x = s.Linear(x, v.postQuant)
	}
	x = s.Conv2D(x, v.convIn, h, w, 3, 1)
	// block runs one piece and frees its intermediates; Eval lets a
	// cancelled context stop the decoding between pieces.
	block := func(f func(x backend.Array) backend.Array) error {
		m := s.Mark()
		x = s.Release(m, f(x))
		return s.Eval(x)
	}
	groups := v.cfg.NormNumGroups
	res := func(r resnet) error {
		return block(func(x backend.Array) backend.Array { return r.forward(s, x, h, w, groups) })
	}
	if err := res(v.midFirst); err != nil {
		return nil, 0, 0, err
	}
	if a := v.midAttn; a != nil {
		if err := block(func(x backend.Array) backend.Array { return a.forward(s, x, h*w, groups) }); err != nil {
			return nil, 0, 0, err
		}
	}
	if err := res(v.midSecond); err != nil {
		return nil, 0, 0, err
	}
	for _, b := range v.up {
		for _, r := range b.resnets {
			if err := res(r); err != nil {
				return nil, 0, 0, err
			}
		}
		if b.upsample != nil {
			if err := block(func(x backend.Array) backend.Array {
				return s.Conv2D(s.Upsample2x(x, h, w), b.upsample, 2*h, 2*w, 3, 1)
			}); err != nil {
				return nil, 0, 0, err
			}
			h, w = 2*h, 2*w
		}
	}
	x = s.Conv2D(s.SiLU(v.normOut.apply(s, x, groups)), v.convOut, h, w, 3, 1)
	out, err := s.Read(x)
	if err != nil {
		return nil, 0, 0, err
	}
	return out, h, w, nil
}

// vaeNormEps is the decoder's GroupNorm epsilon (resnet_eps and
// conv_norm_out's, fixed in diffusers' Decoder).
const vaeNormEps = 1e-6

func (g groupNorm) apply(s backend.Step, x backend.Array, groups int) backend.Array {
	return s.GroupNorm(x, groups, g.w, g.b, vaeNormEps)
}

// forward is ResnetBlock2D: norm1, SiLU, conv1, norm2, SiLU, conv2, plus
// the input (through the 1×1 shortcut when the width changes).
func (r resnet) forward(s backend.Step, x backend.Array, h, w, groups int) backend.Array {
	y := s.Conv2D(s.SiLU(r.norm1.apply(s, x, groups)), r.conv1, h, w, 3, 1)
	y = s.Conv2D(s.SiLU(r.norm2.apply(s, y, groups)), r.conv2, h, w, 3, 1)
	if r.shortcut != nil {
		x = s.Linear(x, r.shortcut)
	}
	return s.Add(x, y)
}

// forward is the mid block's Attention: group norm, one head over all n
// pixels with scale 1/√C, to_out, plus the input.
func (a *vaeAttention) forward(s backend.Step, x backend.Array, n, groups int) backend.Array {
	h := a.norm.apply(s, x, groups)
	scale := float32(1 / math.Sqrt(float64(x.Cols())))
	y := s.EncoderAttention(s.Linear(h, a.q), s.Linear(h, a.k), s.Linear(h, a.v), 1, scale, []int{n})
	return s.Add(s.Linear(y, a.toOut), x)
}

// DecodeImage turns one image's latents as the denoising loop leaves them
// unpacked on the token grid (Latents' result, or Unpack of the
// transformer's packed tokens: [4·latent_channels, h, w], overwritten)
// into its picture, as Flux2KleinPipeline does after its last step: the
// latent batch norm undone, the 2×2 patches unfolded, the VAE's decoder,
// and the pixels quantized as diffusers' image processor does for PIL
// output. The image is h·2·ScaleFactor() by w·2·ScaleFactor() pixels,
// opaque.
func (v *VAE) DecodeImage(ctx context.Context, l Latents) (*image.NRGBA, error) {
	if err := v.Denormalize(l); err != nil {
		return nil, err
	}
	px, h, w, err := v.Decode(ctx, Unpatchify(l))
	if err != nil {
		return nil, err
	}
	return ToImage(px, h, w)
}

// ToImage quantizes decoded pixels [height·width, 3] (values about −1 …
// 1) to an opaque 8-bit image as diffusers' VaeImageProcessor does for
// PIL output: (x·0.5 + 0.5) clamped to [0, 1] in float32, times 255,
// rounded half to even (numpy's round).
func ToImage(pixels []float32, height, width int) (*image.NRGBA, error) {
	if height <= 0 || width <= 0 || len(pixels) != 3*height*width {
		return nil, fmt.Errorf("flux2: %d values for a %d×%d RGB image", len(pixels), height, width)
	}
	img := image.NewNRGBA(image.Rect(0, 0, width, height))
	for p := range height * width {
		y, x := p/width, p%width
		o := img.PixOffset(x, y)
		for c := range 3 {
			u := float32(pixels[3*p+c]*0.5) + 0.5
			if u != u { // NaN: what numpy's cast to uint8 gives on x86
				u = 0
			}
			u = min(max(u, 0), 1)
			img.Pix[o+c] = uint8(math.RoundToEven(float64(float32(u * 255))))
		}
		img.Pix[o+3] = 255
	}
	return img, nil
}
