package gguf

import (
	"fmt"
	"strings"

	"fusion/engine/tensor"
)

// Rotary layout of Q/K projections.
//
// Hugging Face's llama code applies RoPE "rotate-half" style: within each
// head of dimension hd, element i pairs with element i+hd/2. ggml's llama
// graph pairs adjacent elements (2i, 2i+1). llama.cpp's converter
// (convert_hf_to_gguf.py, LlamaModel.permute) therefore reorders the output
// rows of attn_q.weight and attn_k.weight for the "llama" architecture, so that row h·hd + 2i + j of the GGUF tensor is row
// h·hd + j·hd/2 + i of the HF one; K uses the KV head count. Qwen2/Qwen3
// are not permuted: ggml runs them with the NeoX (rotate-half) RoPE.
//
// This package reads and writes tensors as stored. A loader that runs a
// GGUF llama model with HF-layout (rotate-half) kernels must UnpermuteQK
// attn_q/attn_k first; a writer producing a llama GGUF from HF weights must
// PermuteQK them (create-demo does, for "llama"). NeedsQKPermute tells
// which architectures are affected.

// NeedsQKPermute reports whether llama.cpp stores attn_q/attn_k of arch
// in the interleaved (permuted) layout.
func NeedsQKPermute(arch string) bool {
	// Other llama.cpp architectures whose converter subclasses LlamaModel
	// are permuted too; fusion only handles these.
	return arch == "llama"
}

// PermuteQK converts a Q or K projection (or bias) from HF rotate-half row
// order to GGUF's interleaved order. heads is the number of heads the
// tensor's rows hold (attention heads for Q, KV heads for K). The result has
// new data; t is not changed.
func PermuteQK(t tensor.Tensor, heads int) (tensor.Tensor, error) {
	return permuteRows(t, heads, false)
}

// UnpermuteQK is the inverse of PermuteQK: GGUF interleaved rows back to
// HF rotate-half order.
func UnpermuteQK(t tensor.Tensor, heads int) (tensor.Tensor, error) {
	return permuteRows(t, heads, true)
}

func permuteRows(t tensor.Tensor, heads int, inverse bool) (tensor.Tensor, error) {
	if len(t.Shape) == 0 || heads <= 0 {
		return tensor.Tensor{}, fmt.Errorf("gguf: permuting %q: need rows and a positive head count, have shape %v and %d heads", t.Name, t.Shape, heads)
	}
	rows := t.Shape[0]
	inner, err := tensor.NumElements(t.Shape[1:])
	if err != nil {
		return tensor.Tensor{}, fmt.Errorf("gguf: permuting %q: %w", t.Name, err)
	}
	rowBytes, err := t.DType.ByteSize(inner)
	if err != nil {
		return tensor.Tensor{}, fmt.Errorf("gguf: permuting %q: rows are not whole blocks: %w", t.Name, err)
	}
	if rows%int64(2*heads) != 0 {
		return tensor.Tensor{}, fmt.Errorf("gguf: permuting %q: %d rows do not split into %d heads of even size", t.Name, rows, heads)
	}
	if int64(len(t.Data)) != rows*rowBytes {
		return tensor.Tensor{}, fmt.Errorf("gguf: permuting %q: %d bytes of data, shape %v of %v needs %d", t.Name, len(t.Data), t.Shape, t.DType, rows*rowBytes)
	}
	hd := int(rows) / heads
	half := hd / 2
	rb := int(rowBytes)
	out := make([]byte, len(t.Data))
	for h := range heads {
		for i := range half {
			for j := range 2 {
				hf := h*hd + j*half + i // HF rotate-half row
				gg := h*hd + 2*i + j    // GGUF interleaved row
				src, dst := hf, gg
				if inverse {
					src, dst = gg, hf
				}
				copy(out[dst*rb:(dst+1)*rb], t.Data[src*rb:(src+1)*rb])
			}
		}
	}
	t.Data = out
	t.Shape = append([]int64(nil), t.Shape...)
	return t, nil
}

// QKHeads is the head count a Hugging Face q_proj/k_proj weight is
// permuted by (heads for q_proj, kvHeads for k_proj), or 0 for other
// tensors.
func QKHeads(hfName string, heads, kvHeads int) int {
	switch {
	case strings.HasSuffix(hfName, ".self_attn.q_proj.weight"):
		return heads
	case strings.HasSuffix(hfName, ".self_attn.k_proj.weight"):
		return kvHeads
	}
	return 0
}

// PermuteQKFloats is PermuteQK of float32 values of the given shape.
func PermuteQKFloats(name string, shape []int64, v []float32, heads int) ([]float32, error) {
	raw, err := Quantize(tensor.F32, v)
	if err != nil {
		return nil, err
	}
	pt, err := PermuteQK(tensor.Tensor{Name: name, DType: tensor.F32, Shape: shape, Data: raw}, heads)
	if err != nil {
		return nil, err
	}
	return ToFloat32(pt)
}
