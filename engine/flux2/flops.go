package flux2

// StepFLOPs is the floating-point operations (a multiply-add counts 2)
// of one transformer forward over imageTokens image and textTokens text
// tokens: every matrix product (embedders, q/k/v/out, the feed-forwards,
// proj_out, the one-row timestep and modulation layers) and the joint
// attention's two products (scores and weighted values, 2·N²·inner
// each). Norms, RoPE, activations and the softmax are left out (linear
// in the tokens and small beside the products).
func (c TransformerConfig) StepFLOPs(imageTokens, textTokens int) int64 {
	d, m := int64(c.Inner()), int64(c.MLPHidden())
	ni, nt := int64(imageTokens), int64(textTokens)
	n := ni + nt
	flops := 2 * (ni*int64(c.InChannels)*d + nt*int64(c.JointAttentionDim)*d + ni*d*int64(c.Out()))
	// Timestep embedding, the 6+6+3 shared modulation rows and norm_out's 2.
	flops += 2 * (int64(c.TimestepGuidanceChannels)*d + d*d + 17*d*d)
	// A block, double or single, does per token q, k, v and the
	// attention's output (4·d²) and a SwiGLU feed-forward (3·d·m), and
	// attends over the joint sequence (2·2·N²·d).
	block := 2*n*(4*d*d+3*d*m) + 4*n*n*d
	return flops + int64(c.NumLayers+c.NumSingleLayers)*block
}

// DecodeFLOPs is the floating-point operations of the VAE decoder on the
// latents of a width×height image: every convolution (3×3 and 1×1, at
// the resolution it runs at) and the mid-block attention's projections
// and two products over the latent pixels. Group norms, SiLU and the
// upsampling copies are left out.
func (c VAEConfig) DecodeFLOPs(width, height int) int64 {
	dec := c.decoderChannels()
	if len(dec) == 0 || width <= 0 || height <= 0 {
		return 0
	}
	s := int64(c.ScaleFactor())
	px := (int64(width) / s) * (int64(height) / s)
	conv := func(px, in, out, k int64) int64 { return 2 * px * in * out * k * k }
	resnet := func(px, in, out int64) int64 {
		f := conv(px, in, out, 3) + conv(px, out, out, 3)
		if in != out {
			f += conv(px, in, out, 1)
		}
		return f
	}
	lat := int64(c.LatentChannels)
	prev := int64(dec[len(dec)-1])
	var flops int64
	if c.UsePostQuantConv {
		flops += conv(px, lat, lat, 1)
	}
	flops += conv(px, lat, prev, 3)
	flops += 2 * resnet(px, prev, prev)
	if c.MidBlockAddAttention {
		flops += 4*conv(px, prev, prev, 1) + 4*px*px*prev
	}
	for p := range c.upPieces(px) {
		if p.upsample {
			flops += conv(4*p.px, p.out, p.out, 3)
		} else {
			flops += resnet(p.px, p.in, p.out)
		}
	}
	px <<= 2 * (len(dec) - 1) // the output resolution
	return flops + conv(px, int64(dec[0]), int64(c.OutChannels), 3)
}
