package backend

import "fmt"

// ImageOps are the ops of convolutional image models (part of Step):
// what FLUX.2's VAE decoder needs besides Linear, SiLU, Add and
// EncoderAttention.
//
// An image is an array [height·width, channels]: one row per pixel, the
// rows in row-major pixel order (y, then x), the channels side by side in
// a row — NHWC for one image, the layout of mlx's convolutions. So a 1×1
// convolution is a Linear, and the mid-block attention over the pixels is
// EncoderAttention over the rows. The ops take the image's height and
// width; rows must equal height·width.
type ImageOps interface {
	// Conv2D convolves the image x [h·w, C] with w [Out, k·k·C]: stride
	// 1, zero padding pad on every side, output pixel (y, x) =
	// Σ_{i,j} x[y+i−pad, x+j−pad]·W_{i,j}ᵀ + bias, where W_{i,j} is
	// columns [(i·k+j)·C, (i·k+j+1)·C) of w and pixels outside the image
	// read as zeros. So w holds PyTorch's [Out, C, k, k] weight with the
	// channels moved last, [Out, k, k, C] (mlx conv2d's layout; see
	// ConvData). Returns [(h+2·pad−k+1)·(w+2·pad−k+1), Out].
	Conv2D(x Array, w Weight, height, width, kernel, pad int) Array
	// GroupNorm normalizes the image x [h·w, C] per group of C/groups
	// consecutive channels over all pixels, (x−mean)·rsqrt(var + eps)
	// with the biased variance, in float32, then multiplies by w and adds
	// bias per channel (torch.nn.GroupNorm of one image; mlx
	// nn.GroupNorm with pytorch_compatible). w and bias have C values.
	GroupNorm(x Array, groups int, w, bias Vector, eps float32) Array
	// Upsample2x repeats every pixel of the image x [h·w, C] into a 2×2
	// block: [(2h)·(2w), C] (torch's nearest interpolation with scale
	// factor 2).
	Upsample2x(x Array, height, width int) Array
}

// Conv2DShape checks the arguments of Step.Conv2D and returns the output
// image's height and width, or an error saying what does not fit.
func Conv2DShape(x Array, w Weight, height, width, kernel, pad int) (oh, ow int, err error) {
	oh, ow = height+2*pad-kernel+1, width+2*pad-kernel+1
	if height <= 0 || width <= 0 || x.Rows() != height*width || kernel <= 0 || pad < 0 || pad >= kernel ||
		w.In() != kernel*kernel*x.Cols() || oh <= 0 || ow <= 0 {
		return 0, 0, fmt.Errorf("Conv2D: x [%d, %d] as %d×%d, weight [%d, %d], kernel %d, pad %d",
			x.Rows(), x.Cols(), height, width, w.Out(), w.In(), kernel, pad)
	}
	return oh, ow, nil
}

// GroupNormShape checks the arguments of Step.GroupNorm.
func GroupNormShape(x Array, groups int, w, bias Vector) error {
	if groups <= 0 || x.Cols()%groups != 0 || w.Len() != x.Cols() || bias.Len() != x.Cols() || x.Rows() == 0 {
		return fmt.Errorf("GroupNorm: x [%d, %d], %d groups, weight %d, bias %d", x.Rows(), x.Cols(), groups, w.Len(), bias.Len())
	}
	return nil
}

// Upsample2xShape checks the arguments of Step.Upsample2x.
func Upsample2xShape(x Array, height, width int) error {
	if height <= 0 || width <= 0 || x.Rows() != height*width {
		return fmt.Errorf("Upsample2x: x [%d, %d] as %d×%d", x.Rows(), x.Cols(), height, width)
	}
	return nil
}
