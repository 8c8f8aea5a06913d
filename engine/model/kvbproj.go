package model

import (
	"encoding/binary"
	"fmt"
	"math"

	"fusion/engine/backend"
	"fusion/engine/modelfile"
	"fusion/engine/tensor"
)

// loadMLAHeads loads MLA's per-head embed_q [lora, nope] and unembed_out
// [v, lora] (mlx-lm 0.32.2's layout), or, from a checkpoint that has
// kv_b_proj [heads·(nope+v), lora] instead (Hugging Face's, and
// mlx-community conversions made before mlx-lm split it), makes them as
// mlx-lm's sanitize does: head h's first nope rows transposed are
// embed_q[h], its last v rows unembed_out[h]. A quantized kv_b_proj
// (affine) is dequantized to the scales' type, split, and each part
// quantized again with the same bits and group size, as mlx-lm does on
// load; the rebuilt weights live in Go memory.
func loadMLAHeads(w *loader, p string) (embedQ, unembedOut []backend.Weight) {
	c := w.cfg
	m, heads := c.MLA, c.NumAttentionHeads
	if w.err != nil {
		return nil, nil
	}
	if !w.src.has(p + "kv_b_proj.weight") {
		return w.experts(p+"embed_q", heads, m.KVLoraRank, m.NopeDim), w.experts(p+"unembed_out", heads, m.VDim, m.KVLoraRank)
	}
	lin, err := w.src.module(p + "kv_b_proj")
	if err == nil && (lin.Out != heads*(m.NopeDim+m.VDim) || lin.In != m.KVLoraRank) {
		err = fmt.Errorf("%w: %skv_b_proj is [%d, %d], the config says [%d, %d]", ErrBadWeights, p, lin.Out, lin.In, heads*(m.NopeDim+m.VDim), m.KVLoraRank)
	}
	if err == nil && lin.Quantized && lin.Mode != modelfile.ModeAffine {
		err = fmt.Errorf("%w: %skv_b_proj quantized in %s (only affine is split)", modelfile.ErrUnsupported, p, lin.Mode)
	}
	var full []float32
	dt := lin.Weight.DType // the type the values are held in
	if err == nil && lin.Quantized {
		dt = lin.Scales.DType // mx.dequantize computes in the scales' type
		full, err = dequantizeAs(lin, dt)
	} else if err == nil {
		full, err = lin.Dequantize()
	}
	if err != nil {
		w.fail(err)
		return nil, nil
	}
	rowsOf := m.NopeDim + m.VDim
	lora := m.KVLoraRank
	embedQ, unembedOut = make([]backend.Weight, heads), make([]backend.Weight, heads)
	for h := range heads {
		wk := make([]float32, lora*m.NopeDim) // [lora, nope]: rows h·(nope+v) … +nope, transposed
		for r := range m.NopeDim {
			for c, v := range full[(h*rowsOf+r)*lora : (h*rowsOf+r+1)*lora] {
				wk[c*m.NopeDim+r] = v
			}
		}
		wv := full[(h*rowsOf+m.NopeDim)*lora : (h+1)*rowsOf*lora] // [v, lora]
		for _, part := range []struct {
			dst     *backend.Weight
			name    string
			data    []float32
			out, in int
		}{{&embedQ[h], fmt.Sprintf("%sembed_q[%d]", p, h), wk, lora, m.NopeDim}, {&unembedOut[h], fmt.Sprintf("%sunembed_out[%d]", p, h), wv, m.VDim, lora}} {
			d, err := rebuilt(part.name, part.data, part.out, part.in, dt, lin)
			if err != nil {
				w.fail(fmt.Errorf("%w: %w", ErrBadWeights, err))
				return nil, nil
			}
			if *part.dst = w.upload(d, part.out, part.in); *part.dst == nil {
				return nil, nil
			}
		}
	}
	return embedQ, unembedOut
}

// rebuilt describes a [out, in] matrix made on load: in type dt, or
// quantized as like is (affine, its bits and group size, scales and
// biases in dt).
func rebuilt(name string, vals []float32, out, in int, dt tensor.DType, like *modelfile.Linear) (backend.WeightData, error) {
	shape := []int64{int64(out), int64(in)}
	if !like.Quantized {
		return backend.WeightData{Name: name, Format: backend.Dense, Out: out, In: in,
			Data: tensor.Tensor{Name: name, DType: dt, Shape: shape, Data: encodeFloats(dt, vals)}}, nil
	}
	packed, scales, biases, err := modelfile.QuantizeAffine(vals, out, in, like.GroupSize, like.Bits)
	if err != nil {
		return backend.WeightData{}, fmt.Errorf("%s: %w", name, err)
	}
	words := make([]byte, 4*len(packed))
	for i, v := range packed {
		binary.LittleEndian.PutUint32(words[4*i:], v)
	}
	groups := []int64{int64(out), int64(in / like.GroupSize)}
	return backend.WeightData{Name: name, Format: backend.MLXAffine, Out: out, In: in, Bits: like.Bits, Group: like.GroupSize,
		Data:   tensor.Tensor{Name: name, DType: tensor.U32, Shape: []int64{int64(out), int64(len(packed) / out)}, Data: words},
		Scales: tensor.Tensor{Name: name + ".scales", DType: dt, Shape: groups, Data: encodeFloats(dt, scales)},
		Biases: tensor.Tensor{Name: name + ".biases", DType: dt, Shape: groups, Data: encodeFloats(dt, biases)}}, nil
}

// dequantizeAs dequantizes an affine module as mx.dequantize does for
// scales of type dt: each product q·scale rounded to dt, then the sum
// with the bias rounded to dt.
func dequantizeAs(l *modelfile.Linear, dt tensor.DType) ([]float32, error) {
	scales, err := modelfile.ToFloat32(l.Scales)
	if err != nil {
		return nil, err
	}
	biases, err := modelfile.ToFloat32(l.Biases)
	if err != nil {
		return nil, err
	}
	packed := make([]uint32, len(l.Weight.Data)/4)
	for i := range packed {
		packed[i] = binary.LittleEndian.Uint32(l.Weight.Data[4*i:])
	}
	if len(packed) != l.Out*modelfile.PackedCols(l.In, l.Bits) || len(scales) != l.Out*(l.In/l.GroupSize) || len(biases) != len(scales) {
		return nil, fmt.Errorf("%w: %s: quantized tensors do not describe [%d, %d]", ErrBadWeights, l.Path, l.Out, l.In)
	}
	out := make([]float32, l.Out*l.In)
	codes := modelfile.UnpackAffine(packed, l.Bits, 0, len(out))
	for i, q := range codes {
		g := i / l.GroupSize
		out[i] = roundTo(dt, roundTo(dt, float32(q)*scales[g])+biases[g])
	}
	return out, nil
}

// roundTo rounds v to the nearest value of dt (F32, F16 or BF16).
func roundTo(dt tensor.DType, v float32) float32 {
	switch dt {
	case tensor.BF16:
		return tensor.BF16ToF32(tensor.F32ToBF16(v))
	case tensor.F16:
		return tensor.F16ToF32(tensor.F32ToF16(v))
	}
	return v
}

// encodeFloats stores vals in dt (F32, F16 or BF16), little-endian.
func encodeFloats(dt tensor.DType, vals []float32) []byte {
	if dt == tensor.F32 {
		b := make([]byte, 4*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		return b
	}
	b := make([]byte, 2*len(vals))
	for i, v := range vals {
		h := tensor.F32ToBF16(v)
		if dt == tensor.F16 {
			h = tensor.F32ToF16(v)
		}
		binary.LittleEndian.PutUint16(b[2*i:], h)
	}
	return b
}
