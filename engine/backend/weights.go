package backend

import (
	"fmt"

	"fusion/engine/tensor"
)

// Format is how a weight matrix is stored.
type Format int

// Weight formats.
const (
	// Dense: F32, F16 or BF16 elements, row-major [Out, In].
	Dense Format = iota
	// MLXAffine: mlx-lm's affine quantization; Data is the U32 packed
	// codes [Out, In·Bits/32], Scales and Biases [Out, In/GroupSize].
	MLXAffine
	// GGUFBlocks: a ggml block type (Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K,
	// Q6_K), row-major
	// [Out, In], each row whole blocks.
	GGUFBlocks
	// MLXFloat: one of MLX's floating-point modes (Mode "mxfp4", "mxfp8"
	// or "nvfp4"; see tensor.FPFormat): Data is the U32 packed codes,
	// Scales the U8 scales [Out, In/group]; no Biases.
	MLXFloat
)

func (f Format) String() string {
	switch f {
	case Dense:
		return "dense"
	case MLXAffine:
		return "mlx-affine"
	case GGUFBlocks:
		return "gguf"
	case MLXFloat:
		return "mlx-float"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// WeightData describes a matrix as a model file stores it. Tensors hold
// the file's bytes (memory-mapped or read); a backend may use them in
// place.
type WeightData struct {
	Name    string // for errors, e.g. "model.layers.3.mlp.down_proj"
	Format  Format
	Out, In int
	Data    tensor.Tensor
	Scales  tensor.Tensor  // MLXAffine and MLXFloat
	Biases  tensor.Tensor  // MLXAffine only
	Mode    string         // MLXFloat only
	Bits    int            // MLXAffine only
	Group   int            // MLXAffine only
	Bias    *tensor.Tensor // additive bias [Out] (F32, F16 or BF16), or nil
}

// VectorData is a float vector (F32, F16 or BF16) as a file stores it.
type VectorData struct {
	Name string
	Data tensor.Tensor
}

// RowRange returns rows [from, to) of w as a weight of its own: views of
// the same bytes (every format stores a matrix row after row, with its
// scales, biases and additive bias per row), e.g. the q, k and v parts of
// a fused qkv projection. Each output row of a product is its own dot
// product, so the parts compute what the whole would.
func RowRange(w WeightData, from, to int) (WeightData, error) {
	if from < 0 || to > w.Out || from >= to {
		return WeightData{}, fmt.Errorf("%s: rows [%d, %d) of %d", w.Name, from, to, w.Out)
	}
	rows := func(t tensor.Tensor) (tensor.Tensor, error) {
		if len(t.Shape) == 0 || t.Shape[0] != int64(w.Out) || len(t.Data)%w.Out != 0 {
			return t, fmt.Errorf("%s: %s has shape %v and %d bytes, not %d rows", w.Name, t.Name, t.Shape, len(t.Data), w.Out)
		}
		size := len(t.Data) / w.Out
		shape := append([]int64{int64(to - from)}, t.Shape[1:]...)
		return tensor.Tensor{Name: fmt.Sprintf("%s[%d:%d]", t.Name, from, to), DType: t.DType, Shape: shape,
			Data: t.Data[from*size : to*size : to*size]}, nil
	}
	out := w
	out.Name, out.Out = fmt.Sprintf("%s[%d:%d]", w.Name, from, to), to-from
	var err error
	if out.Data, err = rows(w.Data); err != nil {
		return WeightData{}, err
	}
	if w.Format == MLXAffine || w.Format == MLXFloat {
		if out.Scales, err = rows(w.Scales); err != nil {
			return WeightData{}, err
		}
	}
	if w.Format == MLXAffine {
		if out.Biases, err = rows(w.Biases); err != nil {
			return WeightData{}, err
		}
	}
	if w.Bias != nil {
		b, err := rows(*w.Bias)
		if err != nil {
			return WeightData{}, err
		}
		out.Bias = &b
	}
	return out, nil
}

// ConvData returns a convolution weight stored as PyTorch's [out, in,
// kernel…] (w: one kernel axis for Conv1D, two for Conv2D) in the [out,
// kernel…·in] layout Step.Conv1D and Step.Conv2D take (the channels
// moved after the kernel axes), with its bias if not nil. The transposed
// copy is new memory (w is not kept), except for a kernel of one tap,
// whose layout is already right: a view of w.
func ConvData(name string, w tensor.Tensor, bias *tensor.Tensor) (WeightData, error) {
	if len(w.Shape) < 3 || len(w.Shape) > 4 || w.DType.Quantized() {
		return WeightData{}, fmt.Errorf("backend: convolution %s: %v of shape %v", name, w.DType, w.Shape)
	}
	out, in, kernel := int(w.Shape[0]), int(w.Shape[1]), 1
	for _, k := range w.Shape[2:] {
		kernel *= int(k)
	}
	n, err := tensor.NumElements(w.Shape)
	if err != nil || n == 0 || int64(len(w.Data))%n != 0 {
		return WeightData{}, fmt.Errorf("backend: convolution %s: %d bytes for shape %v", name, len(w.Data), w.Shape)
	}
	size := len(w.Data) / int(n)
	shape := []int64{int64(out), int64(kernel * in)}
	if kernel == 1 {
		// [out, in, 1…] is already [out, 1·in]: a view.
		return WeightData{Name: name, Format: Dense, Out: out, In: in, Bias: bias,
			Data: tensor.Tensor{Name: name, DType: w.DType, Shape: shape, Data: w.Data}}, nil
	}
	t := make([]byte, len(w.Data))
	for o := range out {
		for c := range in {
			for j := range kernel {
				src := ((o*in+c)*kernel + j) * size
				dst := ((o*kernel+j)*in + c) * size
				copy(t[dst:dst+size], w.Data[src:src+size])
			}
		}
	}
	return WeightData{Name: name, Format: Dense, Out: out, In: kernel * in, Bias: bias,
		Data: tensor.Tensor{Name: name, DType: w.DType, Shape: shape, Data: t}}, nil
}
