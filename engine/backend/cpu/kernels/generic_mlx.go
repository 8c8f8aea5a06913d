package kernels

import "encoding/binary"

// MLX affine rows store element i of a row at bit offset i·bits of the
// little-endian byte stream (for 2, 4 and 8 bits this is the same as
// "element k of a uint32 word in bits [k·bits, (k+1)·bits)").

func mlx4Generic(x, _ []float32, w []byte, s, b, xsum []float32, group int) float32 {
	w = w[:len(x)/2]
	var sum float32
	for g, sc := range s {
		xs := x[g*group : (g+1)*group]
		ws := w[g*group/2:]
		var a0, a1 float32
		for j := 0; j+8 <= len(xs); j += 8 {
			u := binary.LittleEndian.Uint32(ws[j/2:])
			a0 += xs[j]*float32(u&15) + xs[j+1]*float32(u>>4&15) +
				xs[j+2]*float32(u>>8&15) + xs[j+3]*float32(u>>12&15)
			a1 += xs[j+4]*float32(u>>16&15) + xs[j+5]*float32(u>>20&15) +
				xs[j+6]*float32(u>>24&15) + xs[j+7]*float32(u>>28)
		}
		sum += sc * (a0 + a1)
	}
	return sum + dotF32Generic(b, xsum)
}

func mlx8Generic(x []float32, w []byte, s, b, xsum []float32, group int) float32 {
	w = w[:len(x)]
	var sum float32
	for g, sc := range s {
		xs := x[g*group : (g+1)*group]
		ws := w[g*group : (g+1)*group]
		var a0, a1 float32
		for j := 0; j+2 <= len(xs); j += 2 {
			a0 += xs[j] * float32(ws[j])
			a1 += xs[j+1] * float32(ws[j+1])
		}
		sum += sc * (a0 + a1)
	}
	return sum + dotF32Generic(b, xsum)
}

// mlxCode returns element i of a bit stream of bits-bit codes.
func mlxCode(w []byte, bits, i int) uint32 {
	off := i * bits
	b := off >> 3
	v := uint32(w[b])
	if b+1 < len(w) {
		v |= uint32(w[b+1]) << 8
	}
	return v >> (off & 7) & (1<<bits - 1)
}

// mlxBitsGeneric handles any width from 2 to 8 bits.
func mlxBitsGeneric(x []float32, w []byte, s []float32, group, bits int) float32 {
	w = w[:len(x)*bits/8]
	var sum float32
	for g, sc := range s {
		var acc float32
		for i := g * group; i < (g+1)*group; i++ {
			acc += x[i] * float32(mlxCode(w, bits, i))
		}
		sum += sc * acc
	}
	return sum
}
