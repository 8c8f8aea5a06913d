package safetensors

import (
	"cmp"
	"slices"

	"fusion/engine/tensor"
)

// pythonRank orders dtypes as the Python library's Rust core does
// (BOOL < U8 < I8 < I16 < U16 < F16 < BF16 < I32 < U32 < F32 < F64 < I64 <
// U64).
func pythonRank(d tensor.DType) int {
	switch d {
	case tensor.Bool:
		return 0
	case tensor.U8:
		return 1
	case tensor.I8:
		return 2
	case tensor.I16:
		return 3
	case tensor.U16:
		return 4
	case tensor.F16:
		return 5
	case tensor.BF16:
		return 6
	case tensor.I32:
		return 7
	case tensor.U32:
		return 8
	case tensor.F32:
		return 9
	case tensor.F64:
		return 10
	case tensor.I64:
		return 11
	case tensor.U64:
		return 12
	}
	return -1
}

// SortLikePython sorts tensors into the order the Python library writes
// them (dtype, widest first, then name), so that Write produces the same
// bytes as safetensors.numpy.save for the same tensors and metadata.
func SortLikePython(ts []tensor.Tensor) {
	slices.SortStableFunc(ts, func(a, b tensor.Tensor) int {
		if c := cmp.Compare(pythonRank(b.DType), pythonRank(a.DType)); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
}
