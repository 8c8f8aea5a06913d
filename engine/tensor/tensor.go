// Package tensor holds the few types every weight format shares: element
// types, shapes and a named tensor whose bytes live in a buffer owned by the
// file it came from (read into memory or memory-mapped).
package tensor

import (
	"fmt"
	"math"
)

// DType is the element type of a tensor as stored on disk.
type DType uint8

// Element types. Block-quantized GGUF types store a whole block of
// elements in BlockBytes bytes; the rest store one element per ElemBytes.
const (
	Invalid DType = iota
	F32
	F16
	BF16
	F64
	I8
	I16
	I32
	I64
	U8
	U16
	U32
	U64
	Bool
	// GGUF block-quantized types.
	Q8_0
	Q4_0
	Q4_1
	Q5_0
	Q5_1
	Q2_K
	Q3_K
	Q4_K
	Q5_K
	Q6_K
	Q8_K
	// MXFP4 is ggml's (type 39): blocks of 32 E2M1 codes under one E8M0
	// scale (gpt-oss's experts), not MLX's mxfp4 layout.
	MXFP4
)

type dtypeInfo struct {
	name       string
	blockElems int // elements per block (1 for plain types)
	blockBytes int // bytes per block
}

var dtypeInfos = [...]dtypeInfo{
	Invalid: {"invalid", 0, 0},
	F32:     {"F32", 1, 4},
	F16:     {"F16", 1, 2},
	BF16:    {"BF16", 1, 2},
	F64:     {"F64", 1, 8},
	I8:      {"I8", 1, 1},
	I16:     {"I16", 1, 2},
	I32:     {"I32", 1, 4},
	I64:     {"I64", 1, 8},
	U8:      {"U8", 1, 1},
	U16:     {"U16", 1, 2},
	U32:     {"U32", 1, 4},
	U64:     {"U64", 1, 8},
	Bool:    {"BOOL", 1, 1},
	Q8_0:    {"Q8_0", 32, 34},
	Q4_0:    {"Q4_0", 32, 18},
	Q4_1:    {"Q4_1", 32, 20},
	Q5_0:    {"Q5_0", 32, 22},
	Q5_1:    {"Q5_1", 32, 24},
	Q2_K:    {"Q2_K", 256, 84},
	Q3_K:    {"Q3_K", 256, 110},
	Q4_K:    {"Q4_K", 256, 144},
	Q5_K:    {"Q5_K", 256, 176},
	Q6_K:    {"Q6_K", 256, 210},
	Q8_K:    {"Q8_K", 256, 292},
	MXFP4:   {"MXFP4", 32, 17},
}

func (d DType) info() dtypeInfo {
	if int(d) >= len(dtypeInfos) {
		return dtypeInfos[Invalid]
	}
	return dtypeInfos[d]
}

// String returns the safetensors spelling of plain types and the GGML
// spelling of block types.
func (d DType) String() string { return d.info().name }

// Valid reports whether d is a known element type.
func (d DType) Valid() bool { return d != Invalid && int(d) < len(dtypeInfos) }

// BlockElems is the number of elements one storage block holds (1 for
// plain types, 32 or 256 for GGUF block types).
func (d DType) BlockElems() int { return d.info().blockElems }

// BlockBytes is the size in bytes of one storage block.
func (d DType) BlockBytes() int { return d.info().blockBytes }

// Quantized reports whether d is a GGUF block-quantized type.
func (d DType) Quantized() bool { return d.info().blockElems > 1 }

// ByteSize returns the storage size of n elements of type d, or an error
// when n is not a whole number of blocks or the size overflows int64.
func (d DType) ByteSize(n int64) (int64, error) {
	inf := d.info()
	if inf.blockElems == 0 {
		return 0, fmt.Errorf("tensor: invalid dtype %d", d)
	}
	if n < 0 {
		return 0, fmt.Errorf("tensor: negative element count %d", n)
	}
	if n%int64(inf.blockElems) != 0 {
		return 0, fmt.Errorf("tensor: %d elements is not a multiple of the %s block size %d", n, inf.name, inf.blockElems)
	}
	blocks := n / int64(inf.blockElems)
	if blocks > math.MaxInt64/int64(inf.blockBytes) {
		return 0, fmt.Errorf("tensor: size of %d %s elements overflows", n, inf.name)
	}
	return blocks * int64(inf.blockBytes), nil
}

// NumElements multiplies out a shape, failing on negative dimensions or
// overflow (shapes come from untrusted headers). A scalar (empty shape)
// has one element.
func NumElements(shape []int64) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("tensor: negative dimension %d in shape %v", d, shape)
		}
		if d != 0 && n > math.MaxInt64/d {
			return 0, fmt.Errorf("tensor: shape %v overflows", shape)
		}
		n *= d
	}
	return n, nil
}

// Tensor is a named, typed view of bytes owned by a weight file. Shape is
// in row-major order, outermost dimension first (the safetensors and
// PyTorch convention; GGUF readers reverse GGUF's innermost-first order).
type Tensor struct {
	Name  string
	DType DType
	Shape []int64
	Data  []byte
}

// Elements returns the element count of t.
func (t *Tensor) Elements() int64 {
	n, _ := NumElements(t.Shape)
	return n
}
