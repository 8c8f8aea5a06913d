package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"fusion/engine/tensor"
)

// Test helpers: random data, straightforward scalar dequantizers written
// from the format definitions, and float64 reference products.

func newRand(t testing.TB) *rand.Rand {
	t.Helper()
	return rand.New(rand.NewPCG(1, uint64(len(t.Name()))))
}

func randFloats(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func putU16(b []byte, v uint16) { binary.LittleEndian.PutUint16(b, v) }

func u16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }

// encodeFloats stores xs as dt (F32, BF16 or F16) bytes.
func encodeFloats(xs []float32, dt tensor.DType) []byte {
	switch dt {
	case tensor.F32:
		b := make([]byte, 4*len(xs))
		for i, v := range xs {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		return b
	case tensor.BF16:
		b := make([]byte, 2*len(xs))
		for i, v := range xs {
			putU16(b[2*i:], tensor.F32ToBF16(v))
		}
		return b
	case tensor.F16:
		b := make([]byte, 2*len(xs))
		for i, v := range xs {
			putU16(b[2*i:], tensor.F32ToF16(v))
		}
		return b
	}
	panic("encodeFloats: " + dt.String())
}

func decodeFloat(b []byte, i int, dt tensor.DType) float32 {
	switch dt {
	case tensor.F32:
		return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	case tensor.BF16:
		return tensor.BF16ToF32(u16(b[2*i:]))
	case tensor.F16:
		return tensor.F16ToF32(u16(b[2*i:]))
	}
	panic("decodeFloat: " + dt.String())
}

// refMatrix is a weight matrix dequantized by the test's own code, with
// for each element the sum of the magnitudes of the terms that make it
// up (|s·q| + |b| for affine formats), which scales the rounding error of
// kernels that split the terms.
type refMatrix struct {
	rows, cols int
	w, mag     []float64
}

func (m *refMatrix) at(o, i int) float64 { return m.w[o*m.cols+i] }

func newRefMatrix(rows, cols int) *refMatrix {
	return &refMatrix{rows: rows, cols: cols, w: make([]float64, rows*cols), mag: make([]float64, rows*cols)}
}

func refDense(dt tensor.DType, rows, cols int, data []byte) *refMatrix {
	m := newRefMatrix(rows, cols)
	for i := range m.w {
		m.w[i] = float64(decodeFloat(data, i, dt))
		m.mag[i] = math.Abs(m.w[i])
	}
	return m
}

// refMLX dequantizes MLX affine weights element by element: the code of
// element i of a row is bits [i·bits, (i+1)·bits) of the row read as one
// little-endian bit string.
func refMLX(rows, cols, bits, group int, packed, scales, biases []byte, sdt tensor.DType) *refMatrix {
	m := newRefMatrix(rows, cols)
	rowBits := cols * bits
	for o := 0; o < rows; o++ {
		for i := 0; i < cols; i++ {
			var q uint32
			for k := 0; k < bits; k++ {
				bit := o*rowBits + i*bits + k
				q |= uint32(packed[bit/8]>>(bit%8)&1) << k
			}
			g := o*(cols/group) + i/group
			s, b := decodeFloat(scales, g, sdt), decodeFloat(biases, g, sdt)
			v := float32(s*float32(q)) + b
			m.w[o*cols+i] = float64(v)
			m.mag[o*cols+i] = math.Abs(float64(s)*float64(q)) + math.Abs(float64(b))
		}
	}
	return m
}

// refGGUF dequantizes ggml blocks element by element from the block
// layouts.
func refGGUF(dt tensor.DType, rows, cols int, data []byte) *refMatrix {
	m := newRefMatrix(rows, cols)
	rowBytes := len(data) / rows
	f16 := func(b []byte) float32 { return tensor.F16ToF32(u16(b)) }
	for o := 0; o < rows; o++ {
		row := data[o*rowBytes:]
		for i := 0; i < cols; i++ {
			var v float32
			var mag float64
			switch dt {
			case tensor.Q8_0:
				blk := row[i/32*34:]
				v = f16(blk) * float32(int8(blk[2+i%32]))
				mag = math.Abs(float64(v))
			case tensor.Q4_0:
				blk := row[i/32*18:]
				j := i % 32
				q := blk[2+j%16] & 15
				if j >= 16 {
					q = blk[2+j%16] >> 4
				}
				v = f16(blk) * float32(int(q)-8)
				mag = math.Abs(float64(v))
			case tensor.Q4_K:
				blk := row[i/256*144:]
				j := i % 256
				sub := j / 32 // scale/min index
				sc, mn := refScaleMinK4(sub, blk[4:16])
				b := blk[16+j/64*32+j%32]
				q := b & 15
				if j%64 >= 32 {
					q = b >> 4
				}
				d1 := f16(blk) * float32(sc)
				m1 := f16(blk[2:]) * float32(mn)
				v = float32(d1*float32(q)) - m1
				mag = math.Abs(float64(d1)*float64(q)) + math.Abs(float64(m1))
			case tensor.Q2_K, tensor.Q3_K:
				// Element j's scale is j/16; its two bits are in byte
				// 32·(j/128) + j%32 at shift 2·((j%128)/32); Q3_K's
				// high bit (set: no −4) in hmask byte j%32, bit j/32.
				j := i % 256
				bb := 84
				if dt == tensor.Q3_K {
					bb = 110
				}
				blk := row[i/256*bb:]
				qs := blk[16:]
				if dt == tensor.Q3_K {
					qs = blk[32:]
				}
				q := int(qs[32*(j/128)+j%32] >> (2 * (j % 128 / 32)) & 3)
				if dt == tensor.Q2_K {
					sc := blk[j/16]
					dl := f16(blk[80:]) * float32(sc&15)
					ml := f16(blk[82:]) * float32(sc>>4)
					v = float32(dl*float32(q)) - ml
					mag = math.Abs(float64(dl)*float64(q)) + math.Abs(float64(ml))
					break
				}
				if blk[j%32]>>(j/32)&1 == 0 {
					q -= 4
				}
				s := j / 16
				lo := blk[96+s%8] & 15
				if s >= 8 {
					lo = blk[96+s%8] >> 4
				}
				hi := blk[104+s%4] >> (2 * (s / 4)) & 3
				dl := f16(blk[108:]) * float32(int(lo|hi<<4)-32)
				v = dl * float32(q)
				mag = math.Abs(float64(v))
			case tensor.Q5_K:
				blk := row[i/256*176:]
				j := i % 256
				sc, mn := refScaleMinK4(j/32, blk[4:16])
				b := blk[48+j/64*32+j%32]
				q := b & 15
				if j%64 >= 32 {
					q = b >> 4
				}
				q |= (blk[16+j%32] >> (j / 32) & 1) << 4
				d1 := f16(blk) * float32(sc)
				m1 := f16(blk[2:]) * float32(mn)
				v = float32(d1*float32(q)) - m1
				mag = math.Abs(float64(d1)*float64(q)) + math.Abs(float64(m1))
			case tensor.Q6_K:
				blk := row[i/256*210:]
				j := i % 256
				half, l := j/128, j%128
				ql := blk[64*half:]
				qh := blk[128+32*half:]
				part, l32 := l/32, l%32 // which of the four 32-runs
				var lo, hi uint8
				switch part {
				case 0:
					lo, hi = ql[l32]&15, qh[l32]&3
				case 1:
					lo, hi = ql[l32+32]&15, qh[l32]>>2&3
				case 2:
					lo, hi = ql[l32]>>4, qh[l32]>>4&3
				case 3:
					lo, hi = ql[l32+32]>>4, qh[l32]>>6&3
				}
				q := int(lo|hi<<4) - 32
				sc := int8(blk[192+8*half+2*part+l32/16])
				v = f16(blk[208:]) * float32(sc) * float32(q)
				mag = math.Abs(float64(v))
			}
			m.w[o*cols+i] = float64(v)
			m.mag[o*cols+i] = mag
		}
	}
	return m
}

// refScaleMinK4 is ggml's get_scale_min_k4, written from its definition.
func refScaleMinK4(j int, q []byte) (sc, mn uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xF | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// randGGUF makes random blocks with sane fp16 scales.
func randGGUF(r *rand.Rand, dt tensor.DType, rows, cols int) []byte {
	nb := rows * cols / dt.BlockElems()
	bb := dt.BlockBytes()
	data := randBytes(r, nb*bb)
	scale := func() uint16 { return tensor.F32ToF16(float32(0.001 + 0.02*r.Float64())) }
	for b := 0; b < nb; b++ {
		blk := data[b*bb : (b+1)*bb]
		switch dt {
		case tensor.Q8_0, tensor.Q4_0:
			putU16(blk, scale())
		case tensor.Q4_K, tensor.Q5_K:
			putU16(blk, scale())
			putU16(blk[2:], scale())
		case tensor.Q2_K:
			putU16(blk[80:], scale())
			putU16(blk[82:], scale())
		case tensor.Q3_K:
			putU16(blk[108:], scale())
		case tensor.Q6_K:
			putU16(blk[208:], scale())
		}
	}
	return data
}

// mlxCase is a random MLX affine matrix.
type mlxCase struct {
	rows, cols, bits, group int
	sdt                     tensor.DType
	packed, scales, biases  []byte
}

func randMLX(r *rand.Rand, rows, cols, bits, group int, sdt tensor.DType) mlxCase {
	ng := rows * cols / group
	s := make([]float32, ng)
	b := make([]float32, ng)
	for i := range s {
		s[i] = float32(0.001 + 0.05*r.Float64())
		b[i] = float32(-s[i] * float32(int(1)<<bits) / 2 * float32(0.5+r.Float64()))
	}
	return mlxCase{
		rows: rows, cols: cols, bits: bits, group: group, sdt: sdt,
		packed: randBytes(r, rows*cols*bits/8),
		scales: encodeFloats(s, sdt), biases: encodeFloats(b, sdt),
	}
}

func (c mlxCase) weights(t testing.TB) *MLXAffine {
	t.Helper()
	w, err := NewMLXAffine(c.rows, c.cols, c.bits, c.group, c.packed, c.scales, c.biases, c.sdt)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func (c mlxCase) ref() *refMatrix {
	return refMLX(c.rows, c.cols, c.bits, c.group, c.packed, c.scales, c.biases, c.sdt)
}

// refProduct returns y[b][o] = Σ x·w in float64 and the magnitudes
// Σ |x|·mag.
func refProduct(m *refMatrix, x []float32, batch int) (y, mag []float64) {
	y = make([]float64, batch*m.rows)
	mag = make([]float64, batch*m.rows)
	for b := 0; b < batch; b++ {
		for o := 0; o < m.rows; o++ {
			var s, a float64
			for i := 0; i < m.cols; i++ {
				xi := float64(x[b*m.cols+i])
				s += xi * m.at(o, i)
				a += math.Abs(xi) * m.mag[o*m.cols+i]
			}
			y[b*m.rows+o], mag[b*m.rows+o] = s, a
		}
	}
	return y, mag
}
