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
	// GGUFBlocks: a ggml block type (Q8_0, Q4_0, Q4_K, Q6_K), row-major
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
