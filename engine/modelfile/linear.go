package modelfile

import (
	"encoding/binary"
	"fmt"
	"slices"

	"fusion/engine/tensor"
)

// maxLinearDim bounds every dimension of a linear layer's tensors, so that
// shape arithmetic cannot overflow (an empty tensor may claim any shape).
const maxLinearDim = 1 << 31

// Linear is the weights of one linear (or embedding) module: a float
// weight [out, in], or an MLX affine-quantized triple: weight U32
// [out, in·bits/32], scales and biases [out, in/group_size] in F16, BF16 or
// F32. Bias is the ordinary additive bias, when the module has one.
type Linear struct {
	Path      string
	Quantized bool
	Bits      int    // quantized only
	GroupSize int    // quantized only
	Mode      string // quantized only: ModeAffine, ModeMXFP4, ModeMXFP8 or ModeNVFP4
	Out, In   int    // logical shape of the weight
	Weight    tensor.Tensor
	Scales    tensor.Tensor // quantized only
	Biases    tensor.Tensor // affine only
	Bias      *tensor.Tensor
}

// LookupLinear returns the module at path (e.g. "model.layers.3.mlp.down_proj"
// or "model.embed_tokens") with its effective quantization, deciding as
// Quantization.For does, and validates dtypes and shapes.
func LookupLinear(w *Weights, q *Quantization, path string) (*Linear, error) {
	return lookupLinear(w.Tensor, q, path)
}

// lookupLinear is LookupLinear over a function that finds tensors by name.
func lookupLinear(get func(name string) (tensor.Tensor, bool), q *Quantization, path string) (*Linear, error) {
	has := func(name string) bool { _, ok := get(name); return ok }
	weight, ok := get(path + ".weight")
	if !ok {
		return nil, fmt.Errorf("modelfile: %w: %s.weight", ErrMissingTensor, path)
	}
	l := &Linear{Path: path, Weight: weight}
	if b, ok := get(path + ".bias"); ok {
		l.Bias = &b
	}
	params, quantized := q.For(path, has(path+".scales"))
	bad := func(format string, args ...any) error {
		return fmt.Errorf("modelfile: %w: %s: %s", ErrBadLinear, path, fmt.Sprintf(format, args...))
	}
	if len(weight.Shape) != 2 {
		return nil, bad("weight has shape %v, want 2 dimensions", weight.Shape)
	}
	for _, t := range []string{".weight", ".scales", ".biases"} {
		if x, ok := get(path + t); ok && slices.ContainsFunc(x.Shape, func(d int64) bool { return d > maxLinearDim }) {
			return nil, bad("%s%s has shape %v, beyond any real layer", path, t, x.Shape)
		}
	}
	if !quantized {
		if has(path + ".scales") {
			return nil, bad("has scales but the quantization config says it is not quantized")
		}
		if !isFloat(weight.DType) {
			return nil, bad("unquantized weight has dtype %v, want F16, BF16 or F32", weight.DType)
		}
		l.Out, l.In = int(weight.Shape[0]), int(weight.Shape[1])
		return l, l.checkBias(bad)
	}
	l.Quantized, l.Bits, l.GroupSize, l.Mode = true, params.Bits, params.GroupSize, params.Mode
	if l.Scales, ok = get(path + ".scales"); !ok {
		return nil, fmt.Errorf("modelfile: %w: %s.scales (the module is quantized)", ErrMissingTensor, path)
	}
	if weight.DType != tensor.U32 {
		return nil, bad("quantized weight has dtype %v, want U32", weight.DType)
	}
	s := l.Scales
	if l.Mode != ModeAffine {
		// mxfp4, mxfp8, nvfp4: uint8 scales, no biases.
		if has(path + ".biases") {
			return nil, bad("has biases, which %s quantization has not", l.Mode)
		}
		if has(path + ".global_scale") {
			return nil, fmt.Errorf("modelfile: %w: %s: an nvfp4 global_scale is not supported", ErrUnsupported, path)
		}
		if s.DType != tensor.U8 || len(s.Shape) != 2 {
			return nil, bad("scales are %v %v, want a U8 matrix (%s)", s.DType, s.Shape, l.Mode)
		}
	} else {
		if l.Biases, ok = get(path + ".biases"); !ok {
			return nil, fmt.Errorf("modelfile: %w: %s.biases (affine quantization)", ErrMissingTensor, path)
		}
		b := l.Biases
		if !isFloat(s.DType) || len(s.Shape) != 2 {
			return nil, bad("scales are %v %v, want a float matrix", s.DType, s.Shape)
		}
		if b.DType != s.DType || len(b.Shape) != 2 || b.Shape[0] != s.Shape[0] || b.Shape[1] != s.Shape[1] {
			return nil, bad("biases %v %v differ from scales %v %v", b.DType, b.Shape, s.DType, s.Shape)
		}
	}
	out, groups := weight.Shape[0], s.Shape[1]
	if s.Shape[0] != out {
		return nil, bad("scales have %d rows, weight has %d", s.Shape[0], out)
	}
	in := groups * int64(l.GroupSize)
	if groups <= 0 || weight.Shape[1]*32 != in*int64(l.Bits) {
		return nil, bad("weight %v holds %d %d-bit values per row, scales %v imply %d (group size %d)",
			weight.Shape, weight.Shape[1]*32/int64(l.Bits), l.Bits, s.Shape, in, l.GroupSize)
	}
	l.Out, l.In = int(out), int(in)
	return l, l.checkBias(bad)
}

func (l *Linear) checkBias(bad func(string, ...any) error) error {
	if l.Bias == nil {
		return nil
	}
	if !isFloat(l.Bias.DType) || len(l.Bias.Shape) != 1 || l.Bias.Shape[0] != int64(l.Out) {
		return bad("bias is %v %v, want a float vector of %d", l.Bias.DType, l.Bias.Shape, l.Out)
	}
	return nil
}

// Dequantize returns the weight as a row-major [Out, In] float32 matrix,
// dequantizing a quantized module (w = q·scale + bias per group).
func (l *Linear) Dequantize() ([]float32, error) {
	if !l.Quantized {
		return ToFloat32(l.Weight)
	}
	if l.Mode != ModeAffine {
		return DequantizeFP(l.Mode, l.Weight.Data, l.Scales.Data, l.Out, l.In)
	}
	scales, err := ToFloat32(l.Scales)
	if err != nil {
		return nil, err
	}
	biases, err := ToFloat32(l.Biases)
	if err != nil {
		return nil, err
	}
	packed := make([]uint32, len(l.Weight.Data)/4)
	for i := range packed {
		packed[i] = binary.LittleEndian.Uint32(l.Weight.Data[4*i:])
	}
	return DequantizeAffine(packed, scales, biases, l.Out, l.In, l.GroupSize, l.Bits)
}

// ToFloat32 converts an F32, F16 or BF16 tensor to float32 values.
func ToFloat32(t tensor.Tensor) ([]float32, error) {
	out, err := tensor.Floats(t)
	if err != nil {
		return nil, fmt.Errorf("modelfile: %w", err)
	}
	return out, nil
}

func isFloat(d tensor.DType) bool { return d == tensor.F32 || d == tensor.F16 || d == tensor.BF16 }

// LookupLinearFunc is LookupLinear over any function that finds tensors
// by name (a single safetensors file, as a diffusers component has).
func LookupLinearFunc(get func(name string) (tensor.Tensor, bool), q *Quantization, path string) (*Linear, error) {
	return lookupLinear(get, q, path)
}
