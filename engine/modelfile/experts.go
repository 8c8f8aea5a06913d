package modelfile

import (
	"fmt"

	"fusion/engine/tensor"
)

// maxExperts bounds num_experts.
const maxExperts = 1 << 10

// LookupExperts returns the experts of a stacked expert module, as
// mlx-lm's SwitchLinear stores them: path.weight [E, out, in] (or, when
// quantized, U32 codes [E, out, in·bits/32] with scales and biases [E,
// out, in/group_size]) and an optional path.bias [E, out]. Each expert
// comes back as an ordinary Linear whose tensors are views of the stacked
// ones (expert e is the e-th contiguous slab of every tensor); its
// quantization is the module's, decided as LookupLinear decides it.
func LookupExperts(w *Weights, q *Quantization, path string) ([]*Linear, error) {
	weight, ok := w.Tensor(path + ".weight")
	if !ok {
		return nil, fmt.Errorf("modelfile: %w: %s.weight", ErrMissingTensor, path)
	}
	if len(weight.Shape) != 3 || weight.Shape[0] <= 0 || weight.Shape[0] > maxExperts {
		return nil, fmt.Errorf("modelfile: %w: %s: stacked expert weight has shape %v, want [experts ≤ %d, out, in]", ErrBadLinear, path, weight.Shape, maxExperts)
	}
	n := int(weight.Shape[0])
	out := make([]*Linear, n)
	for e := range n {
		get := func(name string) (tensor.Tensor, bool) {
			t, ok := w.Tensor(name)
			if !ok {
				return t, false
			}
			return expertSlab(t, n, e)
		}
		l, err := lookupLinear(get, q, path)
		if err != nil {
			return nil, fmt.Errorf("expert %d: %w", e, err)
		}
		out[e] = l
	}
	return out, nil
}

// expertSlab is expert e's part of a tensor stacked over n experts: its
// first axis dropped. A tensor whose first axis is not n (or whose bytes
// do not split evenly) gives itself unchanged, so that the shape checks of
// lookupLinear report it.
func expertSlab(t tensor.Tensor, n, e int) (tensor.Tensor, bool) {
	if len(t.Shape) < 2 || t.Shape[0] != int64(n) || len(t.Data)%n != 0 {
		return t, true
	}
	size := len(t.Data) / n
	return tensor.Tensor{
		Name:  fmt.Sprintf("%s[%d]", t.Name, e),
		DType: t.DType,
		Shape: t.Shape[1:],
		Data:  t.Data[e*size : (e+1)*size : (e+1)*size],
	}, true
}
