package gguf

import "errors"

// Errors every parse failure wraps, so callers can tell a damaged or
// hostile file from one that is valid but uses something this package does
// not handle.
var (
	ErrInvalid     = errors.New("invalid GGUF")
	ErrUnsupported = errors.New("unsupported GGUF feature")
)

// Caps on what a header may declare. Each is far above what real models
// use (a 256k-token vocabulary is a 256k-element string array; DeepSeek V3
// has about a thousand tensors) and far below what would let a small file
// make the reader allocate or loop without end. Besides these, every
// declared count is checked against the bytes left in the file before
// anything is allocated for it.
const (
	maxKeyLen        = 1<<16 - 1 // the GGUF spec's limit
	maxStringLen     = 64 << 20  // a chat template is tens of KiB
	maxArrayLen      = 1 << 26
	maxKVCount       = 1 << 16
	maxTensorCount   = 1 << 20
	maxDims          = 4 // GGML_MAX_DIMS
	maxNameLen       = 1 << 10
	maxNesting       = 8       // arrays of arrays of …
	maxNestedValues  = 1 << 20 // elements of nested arrays, all keys together
	maxHeaderBytes   = 512 << 20
	maxAlignment     = 1 << 16 // real files use 32; page alignment fits
	defaultAlignment = 32
	magic            = "GGUF"
)
