package gguf

import (
	"fmt"

	"fusion/engine/tensor"
)

// GGMLType is a ggml tensor type id as stored in GGUF tensor infos.
type GGMLType uint32

// ggml type ids that map onto tensor.DType.
var ggmlToDType = map[GGMLType]tensor.DType{
	0:  tensor.F32,
	1:  tensor.F16,
	2:  tensor.Q4_0,
	3:  tensor.Q4_1,
	6:  tensor.Q5_0,
	7:  tensor.Q5_1,
	8:  tensor.Q8_0,
	10: tensor.Q2_K,
	11: tensor.Q3_K,
	12: tensor.Q4_K,
	13: tensor.Q5_K,
	14: tensor.Q6_K,
	15: tensor.Q8_K,
	24: tensor.I8,
	25: tensor.I16,
	26: tensor.I32,
	27: tensor.I64,
	28: tensor.F64,
	30: tensor.BF16,
	39: tensor.MXFP4,
}

// ggml type ids that exist but that this package does not handle; files
// using them are refused with ErrUnsupported rather than ErrInvalid.
var ggmlUnsupported = map[GGMLType]string{
	4: "Q4_2 (removed)", 5: "Q4_3 (removed)", 9: "Q8_1",
	16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL",
	21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 29: "IQ1_M",
	31: "Q4_0_4_4 (removed)", 32: "Q4_0_4_8 (removed)", 33: "Q4_0_8_8 (removed)",
	34: "TQ1_0", 35: "TQ2_0", 36: "IQ4_NL_4_4 (removed)", 37: "IQ4_NL_4_8 (removed)",
	38: "IQ4_NL_8_8 (removed)", 40: "NVFP4", 41: "Q1_0",
}

// DTypeOf maps a ggml type id to its tensor.DType.
func DTypeOf(t GGMLType) (tensor.DType, error) {
	if d, ok := ggmlToDType[t]; ok {
		return d, nil
	}
	if name, ok := ggmlUnsupported[t]; ok {
		return tensor.Invalid, fmt.Errorf("%w: ggml type %d (%s)", ErrUnsupported, t, name)
	}
	return tensor.Invalid, fmt.Errorf("%w: unknown ggml type %d", ErrInvalid, t)
}

// GGMLTypeOf maps a tensor.DType to its ggml type id. Types ggml cannot
// store (unsigned integers, bool) are refused.
func GGMLTypeOf(d tensor.DType) (GGMLType, error) {
	for id, dt := range ggmlToDType {
		if dt == d {
			return id, nil
		}
	}
	return 0, fmt.Errorf("%w: dtype %v has no ggml type", ErrUnsupported, d)
}
