package flux2

import "fmt"

// Latents is a float32 tensor [C, H, W] (one image of a batch),
// row-major.
type Latents struct {
	C, H, W int
	Data    []float32
}

// At returns element (c, y, x).
func (l Latents) At(c, y, x int) float32 { return l.Data[(c*l.H+y)*l.W+x] }

// LatentGrid returns the grid of image tokens of a width×height image:
// diffusers' prepare_latents rounds each side down to a multiple of
// vaeScale·2 and divides by it (vaeScale = 2^(len(block_out_channels)−1)).
func LatentGrid(width, height, vaeScale int) (h, w int) {
	return height / (vaeScale * 2), width / (vaeScale * 2)
}

// InitialNoise returns the starting latents of n images drawn from one
// generator, as the pipeline's prepare_latents does:
// randn([n, channels, h, w]) in one call, then split per image.
// channels is the transformer's in_channels (the patchified VAE
// channels).
func InitialNoise(g *Generator, n, channels, h, w int) []Latents {
	all := g.Randn(n * channels * h * w)
	out := make([]Latents, n)
	per := channels * h * w
	for i := range out {
		out[i] = Latents{C: channels, H: h, W: w, Data: all[i*per : (i+1)*per : (i+1)*per]}
	}
	return out
}

// Pack turns [C, H, W] latents into H·W tokens of C channels, token
// y·W+x holding column (y, x) (diffusers' _pack_latents: reshape to
// [C, H·W] and transpose). The result is row-major [H·W, C].
func Pack(l Latents) []float32 {
	n := l.H * l.W
	out := make([]float32, n*l.C)
	for c := 0; c < l.C; c++ {
		for i := 0; i < n; i++ {
			out[i*l.C+c] = l.Data[c*n+i]
		}
	}
	return out
}

// Unpack scatters tokens [len(ids), C] back into [C, h, w] latents by
// their position ids (diffusers' _unpack_latents_with_ids: token i goes
// to row ids[i].H, column ids[i].W).
func Unpack(tokens []float32, ids []PosID, c, h, w int) (Latents, error) {
	if len(tokens) != len(ids)*c {
		return Latents{}, fmt.Errorf("flux2: unpack %d values as %d tokens of %d channels", len(tokens), len(ids), c)
	}
	out := Latents{C: c, H: h, W: w, Data: make([]float32, c*h*w)}
	for i, id := range ids {
		if id.H < 0 || int(id.H) >= h || id.W < 0 || int(id.W) >= w {
			return Latents{}, fmt.Errorf("flux2: token %d at (%d, %d) outside %d×%d", i, id.H, id.W, h, w)
		}
		p := int(id.H)*w + int(id.W)
		for k := 0; k < c; k++ {
			out.Data[k*h*w+p] = tokens[i*c+k]
		}
	}
	return out, nil
}

// Patchify folds every 2×2 patch of [C, H, W] latents into channels:
// [4C, H/2, W/2], channel 4c + 2py + px holding pixel (2y+py, 2x+px) of
// channel c (diffusers' _patchify_latents). H and W must be even.
func Patchify(l Latents) Latents {
	h, w := l.H/2, l.W/2
	out := Latents{C: 4 * l.C, H: h, W: w, Data: make([]float32, l.C*l.H*l.W)}
	for c := 0; c < l.C; c++ {
		for py := 0; py < 2; py++ {
			for px := 0; px < 2; px++ {
				oc := 4*c + 2*py + px
				for y := 0; y < h; y++ {
					for x := 0; x < w; x++ {
						out.Data[(oc*h+y)*w+x] = l.At(c, 2*y+py, 2*x+px)
					}
				}
			}
		}
	}
	return out
}

// Unpatchify is Patchify's inverse (diffusers' _unpatchify_latents):
// [4C, H, W] → [C, 2H, 2W]. l.C must be a multiple of 4.
func Unpatchify(l Latents) Latents {
	c := l.C / 4
	out := Latents{C: c, H: 2 * l.H, W: 2 * l.W, Data: make([]float32, len(l.Data))}
	for k := 0; k < c; k++ {
		for py := 0; py < 2; py++ {
			for px := 0; px < 2; px++ {
				ic := 4*k + 2*py + px
				for y := 0; y < l.H; y++ {
					for x := 0; x < l.W; x++ {
						out.Data[(k*out.H+2*y+py)*out.W+2*x+px] = l.At(ic, y, x)
					}
				}
			}
		}
	}
	return out
}

// PosID is the 4-axis position of a token that FLUX.2's RoPE rotates by:
// T (which image: 0 for the generated one), H and W (the patch's row and
// column), L (the text token's index).
type PosID struct{ T, H, W, L int32 }

// LatentIDs returns the ids of an h×w grid of image tokens in packing
// order: (0, y, x, 0) for token y·w+x (diffusers' _prepare_latent_ids,
// torch.cartesian_prod over t, h, w, l).
func LatentIDs(h, w int) []PosID {
	ids := make([]PosID, 0, h*w)
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			ids = append(ids, PosID{H: int32(y), W: int32(x)})
		}
	}
	return ids
}

// TextIDs returns the ids of n text tokens: (0, 0, 0, i)
// (diffusers' _prepare_text_ids without a t coordinate).
func TextIDs(n int) []PosID {
	ids := make([]PosID, n)
	for i := range ids {
		ids[i].L = int32(i)
	}
	return ids
}
