//go:build !amd64 || purego

package kernels

// features is the read-only CPU feature table: no SIMD levels off amd64
// or with the purego build tag.
var features cpuFeatures
