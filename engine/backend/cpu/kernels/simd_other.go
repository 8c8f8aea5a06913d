//go:build !amd64 || purego

package kernels

// simdImpl is never called off amd64: no SIMD level is supported there.
func simdImpl(Level) impl { return genericImpl }
