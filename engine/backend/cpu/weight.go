package cpu

import (
	"fmt"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu/kernels"
	"fusion/engine/tensor"
)

// weight is a matrix wrapped for the kernels, with its bias widened.
type weight struct {
	name  string
	w     kernels.Weights
	bias  []float32
	bytes int64
}

func (w *weight) Out() int     { return w.w.Rows() }
func (w *weight) In() int      { return w.w.Cols() }
func (w *weight) Bytes() int64 { return w.bytes }

// vector is a norm weight widened to float32.
type vector struct{ v []float32 }

func (v *vector) Len() int     { return len(v.v) }
func (v *vector) Bytes() int64 { return 4 * int64(len(v.v)) }

// Weight wraps d for the kernels, in place (the tensors' bytes must stay
// valid), or as a float32 copy with Options.Dequantize.
func (b *Backend) Weight(d backend.WeightData) (backend.Weight, error) {
	kw, err := wrap(d)
	if err != nil {
		return nil, fmt.Errorf("cpu: %s: %w", d.Name, err)
	}
	if g, ok := kw.(*kernels.GGUF); ok && b.opts.ExactActivations {
		g.ExactActivations = true
	}
	w := &weight{name: d.Name, w: kw, bytes: int64(kw.Bytes())}
	if b.opts.Dequantize {
		if _, dense := kw.(*kernels.Dense); !dense || d.Data.DType != tensor.F32 {
			f := make([]float32, d.Out*d.In)
			for r := range d.Out {
				kernels.DequantizeRow(f[r*d.In:(r+1)*d.In], kw, r)
			}
			if w.w, err = kernels.NewF32(d.Out, d.In, f); err != nil {
				return nil, fmt.Errorf("cpu: %s: %w", d.Name, err)
			}
			w.bytes = 4 * int64(len(f))
		}
	}
	if dn, ok := w.w.(*kernels.Dense); ok && dn.DType() == tensor.F32 && b.k.PackedFast() {
		// F32 matrices are repacked for the outer-product kernels (same
		// size; the file's bytes are no longer read).
		p := kernels.PackF32(dn)
		w.w, w.bytes = p, int64(p.Bytes())
	}
	if d.Bias != nil {
		if w.bias, err = tensor.Floats(*d.Bias); err != nil {
			return nil, fmt.Errorf("cpu: %s bias: %w", d.Name, err)
		}
		if len(w.bias) != d.Out {
			return nil, fmt.Errorf("cpu: %s: bias has %d values, want %d", d.Name, len(w.bias), d.Out)
		}
		w.bytes += 4 * int64(len(w.bias))
	}
	return w, nil
}

func wrap(d backend.WeightData) (kernels.Weights, error) {
	switch d.Format {
	case backend.Dense:
		return kernels.NewDense(d.Data.DType, d.Out, d.In, d.Data.Data)
	case backend.MLXAffine:
		if d.Scales.DType != d.Biases.DType {
			return nil, fmt.Errorf("scales are %v, biases %v", d.Scales.DType, d.Biases.DType)
		}
		return kernels.NewMLXAffine(d.Out, d.In, d.Bits, d.Group, d.Data.Data, d.Scales.Data, d.Biases.Data, d.Scales.DType)
	case backend.GGUFBlocks:
		return kernels.NewGGUF(d.Data.DType, d.Out, d.In, d.Data.Data)
	case backend.MLXFloat:
		return kernels.NewMLXFloat(d.Mode, d.Out, d.In, d.Data.Data, d.Scales.Data)
	}
	return nil, fmt.Errorf("unknown weight format %v", d.Format)
}

// Vector widens a norm weight to float32.
func (b *Backend) Vector(d backend.VectorData) (backend.Vector, error) {
	v, err := tensor.Floats(d.Data)
	if err != nil {
		return nil, fmt.Errorf("cpu: %s: %w", d.Name, err)
	}
	if len(v) == 0 {
		return nil, fmt.Errorf("cpu: %s: empty vector", d.Name)
	}
	return &vector{v: v}, nil
}
