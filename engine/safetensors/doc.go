// Package safetensors reads and writes the safetensors weight format: an
// 8-byte little-endian header length N, N bytes of JSON describing every
// tensor (dtype, shape, data_offsets relative to the data section) plus an
// optional "__metadata__" string map, then the raw tensor bytes.
//
// The reader validates the whole header before trusting any of it (length
// cap, JSON syntax, dtypes, shapes, offsets, sizes, overlaps, duplicate
// names), then hands out tensor.Tensor views whose Data slices point into
// one buffer per file: the file read into memory with a single read, or the
// file memory-mapped (see LoadMode). The writer produces the layout of the
// Python safetensors library: compact JSON, "__metadata__" first, the header
// padded with spaces to a multiple of 8 bytes.
package safetensors
