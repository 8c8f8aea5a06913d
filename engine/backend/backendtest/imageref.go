// Package backendtest holds the reference formulas, in float64, that the
// backends' op tests compare with: written as the math reads, slow, and
// shared so that every backend is held to the same definition.
package backendtest

import "math"

// Conv2D is the convolution of the image x [h·w, c] (pixels row-major,
// channels last) with PyTorch's weight [out, c, k, k] and bias [out] (nil
// for none), stride 1, zero padding pad (torch.nn.Conv2d):
// [(h+2pad−k+1)·(w+2pad−k+1), out].
func Conv2D(x []float32, h, w, c int, weight, bias []float32, out, k, pad int) []float64 {
	oh, ow := h+2*pad-k+1, w+2*pad-k+1
	y := make([]float64, oh*ow*out)
	for py := range oh {
		for px := range ow {
			for o := range out {
				var acc float64
				if bias != nil {
					acc = float64(bias[o])
				}
				for i := range k {
					for j := range k {
						sy, sx := py+i-pad, px+j-pad
						if sy < 0 || sy >= h || sx < 0 || sx >= w {
							continue
						}
						for ch := range c {
							acc += float64(x[(sy*w+sx)*c+ch]) * float64(weight[((o*c+ch)*k+i)*k+j])
						}
					}
				}
				y[(py*ow+px)*out+o] = acc
			}
		}
	}
	return y
}

// GroupNorm normalizes the image x [n, c] per group of c/groups channels
// over all n pixels with the biased variance, then scales by w and adds
// b per channel.
func GroupNorm(x []float32, n, c, groups int, w, b []float32, eps float64) []float64 {
	y := make([]float64, n*c)
	cg := c / groups
	for g := range groups {
		var mean, sq float64
		for p := range n {
			for ch := g * cg; ch < (g+1)*cg; ch++ {
				mean += float64(x[p*c+ch])
			}
		}
		mean /= float64(n * cg)
		for p := range n {
			for ch := g * cg; ch < (g+1)*cg; ch++ {
				d := float64(x[p*c+ch]) - mean
				sq += d * d
			}
		}
		inv := 1 / math.Sqrt(sq/float64(n*cg)+eps)
		for p := range n {
			for ch := g * cg; ch < (g+1)*cg; ch++ {
				y[p*c+ch] = (float64(x[p*c+ch])-mean)*inv*float64(w[ch]) + float64(b[ch])
			}
		}
	}
	return y
}

// Upsample2x is nearest-neighbour upsampling by 2 of the image x [h·w,
// c]: output pixel (y, x) is input pixel (y/2, x/2).
func Upsample2x(x []float32, h, w, c int) []float64 {
	y := make([]float64, 4*h*w*c)
	for py := range 2 * h {
		for px := range 2 * w {
			for ch := range c {
				y[(py*2*w+px)*c+ch] = float64(x[((py/2)*w+px/2)*c+ch])
			}
		}
	}
	return y
}

// ImageCase is one size of the image ops' tests: an h×w image of c
// channels, a convolution to out channels with a k×k kernel and padding
// pad, a group norm of groups groups.
type ImageCase struct{ H, W, C, Out, Kernel, Pad, Groups int }

// ImageCases are odd sizes for every backend's image-op test: kernels 1
// and 3 with and without padding, a 1×1 image, one group and several,
// and an image of more pixels (143) than one 128-row chunk.
var ImageCases = []ImageCase{
	{5, 7, 6, 5, 3, 1, 3},
	{3, 4, 4, 3, 1, 0, 2},
	{1, 1, 2, 3, 3, 1, 1},
	{6, 5, 3, 2, 3, 0, 1},
	{13, 11, 8, 4, 3, 1, 4},
}
