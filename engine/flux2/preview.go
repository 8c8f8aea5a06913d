package flux2

import (
	"context"
	"fmt"
	"image"
)

// stepDone is the callback Latents hands the denoising loop of batch
// image image: progress, then r.OnLatents with the step's latents
// unpacked (nil when neither is set).
func (r Request) stepDone(image int, progress Progress, c, h, w int, ids []PosID) func(step, steps int, x []float32) {
	if progress == nil && r.OnLatents == nil {
		return nil
	}
	return func(step, steps int, x []float32) {
		if progress != nil {
			progress(image, step, steps)
		}
		if r.OnLatents != nil {
			if l, err := Unpack(x, ids, c, h, w); err == nil {
				r.OnLatents(image, step, steps, l)
			}
		}
	}
}

// Preview decodes a low-resolution picture of an image's latents in the
// middle of its denoising (patchified [C, H, W] as Latents and
// Request.OnLatents give them; not changed): the latent batch norm undone
// and the patches unfolded as for the final image, then every 2×2 block
// of the VAE's latents averaged, and the VAE's decoder run on that
// half-size grid. The picture is half the final width and height, and
// the decode costs about a quarter of the final one.
func (p *Pipeline) Preview(ctx context.Context, l Latents) (*image.NRGBA, error) {
	c := Latents{C: l.C, H: l.H, W: l.W, Data: append([]float32(nil), l.Data...)}
	if err := p.VAE.Denormalize(c); err != nil {
		return nil, err
	}
	px, h, w, err := p.VAE.Decode(ctx, PoolLatents(Unpatchify(c)))
	if err != nil {
		return nil, fmt.Errorf("flux2: preview: %w", err)
	}
	return ToImage(px, h, w)
}

// PoolLatents averages every 2×2 block of [C, H, W] latents: [C, H/2,
// W/2] (H and W even, as unpatchified latents are).
func PoolLatents(l Latents) Latents {
	h, w := l.H/2, l.W/2
	out := Latents{C: l.C, H: h, W: w, Data: make([]float32, l.C*h*w)}
	for c := 0; c < l.C; c++ {
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				s := l.At(c, 2*y, 2*x) + l.At(c, 2*y, 2*x+1) + l.At(c, 2*y+1, 2*x) + l.At(c, 2*y+1, 2*x+1)
				out.Data[(c*h+y)*w+x] = s / 4
			}
		}
	}
	return out
}
