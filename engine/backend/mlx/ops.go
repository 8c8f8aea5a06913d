//go:build cgo

package mlx

/*
#include "errors.h"
*/
import "C"

import (
	"fusion/engine/tensor"
)

// Static strings for mlx-c's mode arguments, allocated once.
var (
	cAffine = C.CString("affine")
	cMXFP4  = C.CString("mxfp4")
	cMXFP8  = C.CString("mxfp8")
	cNVFP4  = C.CString("nvfp4")
	cCausal = C.CString("causal")
	cNone   = C.CString("")
)

func (a *Arena) unary(name string, x *Array, f func(res *C.mlx_array) C.int) *Array {
	return a.op(name, []*Array{x}, f)
}

// AsType converts x to dt.
func (a *Arena) AsType(x *Array, dt tensor.DType) *Array {
	d := toMLX(dt)
	return a.unary("mlx_astype", x, func(res *C.mlx_array) C.int { return C.mlx_astype(res, x.c, d, a.rt.stream) })
}

// Reshape gives x a new shape of the same size (one dimension may be −1).
func (a *Arena) Reshape(x *Array, shape ...int) *Array {
	cs := cints(shape)
	return a.unary("mlx_reshape", x, func(res *C.mlx_array) C.int {
		return C.mlx_reshape(res, x.c, ptr(cs), C.size_t(len(cs)), a.rt.stream)
	})
}

// Transpose permutes x's axes.
func (a *Arena) Transpose(x *Array, axes ...int) *Array {
	cs := cints(axes)
	return a.unary("mlx_transpose_axes", x, func(res *C.mlx_array) C.int {
		return C.mlx_transpose_axes(res, x.c, ptr(cs), C.size_t(len(cs)), a.rt.stream)
	})
}

// Add returns x + y (broadcasting).
func (a *Arena) Add(x, y *Array) *Array {
	return a.op("mlx_add", []*Array{x, y}, func(res *C.mlx_array) C.int { return C.mlx_add(res, x.c, y.c, a.rt.stream) })
}

// Multiply returns x·y elementwise (broadcasting).
func (a *Arena) Multiply(x, y *Array) *Array {
	return a.op("mlx_multiply", []*Array{x, y}, func(res *C.mlx_array) C.int { return C.mlx_multiply(res, x.c, y.c, a.rt.stream) })
}

// Sigmoid returns 1/(1+e^−x) elementwise.
func (a *Arena) Sigmoid(x *Array) *Array {
	return a.unary("mlx_sigmoid", x, func(res *C.mlx_array) C.int { return C.mlx_sigmoid(res, x.c, a.rt.stream) })
}

// Erf is the error function, elementwise.
func (a *Arena) Erf(x *Array) *Array {
	return a.unary("mlx_erf", x, func(res *C.mlx_array) C.int { return C.mlx_erf(res, x.c, a.rt.stream) })
}

// Matmul returns x·y over the last two axes (broadcasting the others).
func (a *Arena) Matmul(x, y *Array) *Array {
	return a.op("mlx_matmul", []*Array{x, y}, func(res *C.mlx_array) C.int { return C.mlx_matmul(res, x.c, y.c, a.rt.stream) })
}

// Addmm returns c + x·y in one op (mlx addmm, alpha = beta = 1): what
// mlx.nn.Linear computes when it has a bias, rounded once in the
// output's type rather than after the product and again after the sum.
func (a *Arena) Addmm(c, x, y *Array) *Array {
	return a.op("mlx_addmm", []*Array{c, x, y}, func(res *C.mlx_array) C.int {
		return C.mlx_addmm(res, c.c, x.c, y.c, 1, 1, a.rt.stream)
	})
}

// QuantizedMatmul multiplies x by an MLX affine quantized matrix: packed
// uint32 codes w [out, in·bits/32] with scales and biases [out,
// in/group]. With transpose it computes x·Wᵀ, a Linear layer: [..., in] →
// [..., out], in the type of x.
func (a *Arena) QuantizedMatmul(x, w, scales, biases *Array, transpose bool, group, bits int) *Array {
	return a.QuantizedMatmulMode(x, w, scales, biases, transpose, group, bits, "")
}

// QuantizedMatmulMode is QuantizedMatmul in any of MLX's modes: "" or
// "affine", or a floating-point mode ("mxfp4", "mxfp8", "nvfp4"; biases
// nil, scales uint8).
func (a *Arena) QuantizedMatmulMode(x, w, scales, biases *Array, transpose bool, group, bits int, mode string) *Array {
	g := C.mlx_optional_int{value: C.int(group), has_value: true}
	b := C.mlx_optional_int{value: C.int(bits), has_value: true}
	in, bc := []*Array{x, w, scales}, C.mlx_array_new()
	if biases != nil {
		in, bc = append(in, biases), biases.c
	}
	m := modeString(mode)
	return a.op("mlx_quantized_matmul", in, func(res *C.mlx_array) C.int {
		return C.mlx_quantized_matmul(res, x.c, w.c, scales.c, bc, C.bool(transpose), g, b, m, a.rt.stream)
	})
}

// Softmax normalizes x along axis, accumulating in float32 (precise).
func (a *Arena) Softmax(x *Array, axis int) *Array {
	return a.unary("mlx_softmax_axis", x, func(res *C.mlx_array) C.int {
		return C.mlx_softmax_axis(res, x.c, C.int(axis), true, a.rt.stream)
	})
}

// RMSNorm normalizes the last axis of x, x·rsqrt(mean(x²) + eps) in
// float32, then multiplies by w ([last axis]); mlx fast.rms_norm.
func (a *Arena) RMSNorm(x, w *Array, eps float32) *Array {
	return a.op("mlx_fast_rms_norm", []*Array{x, w}, func(res *C.mlx_array) C.int {
		return C.mlx_fast_rms_norm(res, x.c, w.c, C.float(eps), a.rt.stream)
	})
}

// LayerNorm normalizes the last axis of x to zero mean and unit variance,
// (x − mean)·rsqrt(var + eps), then multiplies by w and adds b ([last
// axis]); mlx fast.layer_norm.
func (a *Arena) LayerNorm(x, w, b *Array, eps float32) *Array {
	return a.op("mlx_fast_layer_norm", []*Array{x, w, b}, func(res *C.mlx_array) C.int {
		return C.mlx_fast_layer_norm(res, x.c, w.c, b.c, C.float(eps), a.rt.stream)
	})
}

// RoPE rotates the first dims features of the last axis of x ([..., L,
// D], the sequence at axis −2) by (offset + position)·scale times the
// inverse frequencies: base^(−2i/dims), or 1/freqs[i] when freqs ([dims/2]
// periods) is not nil. traditional rotates pairs (2i, 2i+1), otherwise
// halves (i, i+dims/2). mlx fast.rope.
func (a *Arena) RoPE(x *Array, dims int, traditional bool, base float32, scale float32, offset int, freqs *Array) *Array {
	in := []*Array{x}
	f := C.mlx_array_new()
	b := C.mlx_optional_float{value: C.float(base), has_value: true}
	if freqs != nil {
		in = append(in, freqs)
		f = freqs.c
		b = C.mlx_optional_float{}
	}
	return a.op("mlx_fast_rope", in, func(res *C.mlx_array) C.int {
		return C.mlx_fast_rope(res, x.c, C.int(dims), C.bool(traditional), b, C.float(scale), C.int(offset), f, a.rt.stream)
	})
}

// Attention is scaled dot-product attention of q [B, heads, qL, D] over k
// and v [B, kvHeads, kL, D], heads a multiple of kvHeads (GQA: K and V are
// not repeated). With causal, query i sees keys j ≤ i + kL − qL (the mask
// is aligned to the last key). mlx fast.scaled_dot_product_attention.
func (a *Arena) Attention(q, k, v *Array, scale float32, causal bool) *Array {
	mode := cNone
	if causal {
		mode = cCausal
	}
	none := C.mlx_array_new()
	return a.op("mlx_fast_scaled_dot_product_attention", []*Array{q, k, v}, func(res *C.mlx_array) C.int {
		return C.mlx_fast_scaled_dot_product_attention(res, q.c, k.c, v.c, C.float(scale), mode, none, none, a.rt.stream)
	})
}

// Take gathers x's entries at indices (an integer array) along axis.
func (a *Arena) Take(x, indices *Array, axis int) *Array {
	return a.op("mlx_take_axis", []*Array{x, indices}, func(res *C.mlx_array) C.int {
		return C.mlx_take_axis(res, x.c, indices.c, C.int(axis), a.rt.stream)
	})
}

func ones(n int) []C.int {
	out := make([]C.int, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

// Slice is x[start[0]:stop[0], start[1]:stop[1], ...] (unit strides).
func (a *Arena) Slice(x *Array, start, stop []int) *Array {
	b, e, st := cints(start), cints(stop), ones(len(start))
	return a.unary("mlx_slice", x, func(res *C.mlx_array) C.int {
		return C.mlx_slice(res, x.c, ptr(b), C.size_t(len(b)), ptr(e), C.size_t(len(e)), ptr(st), C.size_t(len(st)), a.rt.stream)
	})
}

// SliceUpdate is src with the region [start, stop) replaced by update.
func (a *Arena) SliceUpdate(src, update *Array, start, stop []int) *Array {
	b, e, st := cints(start), cints(stop), ones(len(start))
	return a.op("mlx_slice_update", []*Array{src, update}, func(res *C.mlx_array) C.int {
		return C.mlx_slice_update(res, src.c, update.c, ptr(b), C.size_t(len(b)), ptr(e), C.size_t(len(e)), ptr(st), C.size_t(len(st)), a.rt.stream)
	})
}

// Concatenate joins xs along axis.
func (a *Arena) Concatenate(xs []*Array, axis int) *Array {
	if len(xs) == 1 {
		return xs[0]
	}
	cs := make([]C.mlx_array, len(xs))
	for i, x := range xs {
		if x != nil {
			cs[i] = x.c
		}
	}
	return a.op("mlx_concatenate_axis", xs, func(res *C.mlx_array) C.int {
		vec := C.mlx_vector_array_new_data(&cs[0], C.size_t(len(cs)))
		defer C.mlx_vector_array_free(vec)
		return C.mlx_concatenate_axis(res, vec, C.int(axis), a.rt.stream)
	})
}

// Zeros is an array of zeros.
func (a *Arena) Zeros(dt tensor.DType, shape ...int) *Array {
	cs, d := cints(shape), toMLX(dt)
	return a.op("mlx_zeros", nil, func(res *C.mlx_array) C.int {
		return C.mlx_zeros(res, ptr(cs), C.size_t(len(cs)), d, a.rt.stream)
	})
}

// Dequantize widens MLX affine codes w [..., n·bits/32] with scales and
// biases [..., n/group] to dt: q·scale + bias.
func (a *Arena) Dequantize(w, scales, biases *Array, group, bits int, dt tensor.DType) *Array {
	return a.DequantizeMode(w, scales, biases, group, bits, dt, "")
}

// DequantizeMode is Dequantize in any of MLX's modes (see
// QuantizedMatmulMode): code·scale for the floating-point ones.
func (a *Arena) DequantizeMode(w, scales, biases *Array, group, bits int, dt tensor.DType, mode string) *Array {
	g := C.mlx_optional_int{value: C.int(group), has_value: true}
	b := C.mlx_optional_int{value: C.int(bits), has_value: true}
	d := C.mlx_optional_dtype{value: toMLX(dt), has_value: true}
	none := C.mlx_array_new()
	in, bc := []*Array{w, scales}, C.mlx_array_new()
	if biases != nil {
		in, bc = append(in, biases), biases.c
	}
	m := modeString(mode)
	return a.op("mlx_dequantize", in, func(res *C.mlx_array) C.int {
		return C.mlx_dequantize(res, w.c, scales.c, bc, g, b, m, none, d, a.rt.stream)
	})
}

// modeString is the C string of a quantization mode ("" is affine).
func modeString(mode string) *C.char {
	switch mode {
	case "mxfp4":
		return cMXFP4
	case "mxfp8":
		return cMXFP8
	case "nvfp4":
		return cNVFP4
	}
	return cAffine
}
