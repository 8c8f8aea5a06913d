package cpu

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// littleEndian reports whether the machine stores float32 as the block
// format does, so blocks can be viewed in place instead of converted.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// floatsToBytes returns f's values as little-endian bytes, without a copy
// where the machine is little-endian.
func floatsToBytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	if littleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), len(f)*4)
	}
	b := make([]byte, len(f)*4)
	for i, x := range f {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// bytesToFloats reads little-endian float32s: a view of b when the machine
// is little-endian and b is aligned, else a copy.
func bytesToFloats(b []byte) []float32 {
	n := len(b) / 4
	if n == 0 {
		return nil
	}
	if littleEndian && uintptr(unsafe.Pointer(&b[0]))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
	}
	f := make([]float32, n)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}
