package kernels

import (
	"encoding/binary"
	"fmt"

	"fusion/engine/gguf"
	"fusion/engine/tensor"
)

// GGUF is a weight matrix in one of the ggml block formats Q8_0, Q4_0,
// Q2_K, Q3_K, Q4_K, Q5_K or Q6_K, row-major, each row a whole number of
// blocks.
//
// Products quantize each activation row to 8 bits per block of 32 (f32
// scale amax/127, round to nearest) and take integer dot products per
// block, so they differ from x·dequant(W)ᵀ by at most
// Σ_blocks (d_x/2)·‖w_block‖₁ (plus f32 rounding); see the tests.
//
// With ExactActivations set, products instead use the f32 activations
// as they are: each weight row is dequantized (as DequantizeRow) into
// per-worker scratch and multiplied with f32 FMAs, so the result equals
// x·dequant(W)ᵀ up to f32 summation order. It is slower (reference and
// accuracy-sensitive runs).
type GGUF struct {
	dt         tensor.DType
	rows, cols int
	data       []byte
	rowBytes   int

	// ExactActivations selects the f32-activation product. Set it before
	// the weights are first used; it must not change concurrently with a
	// product.
	ExactActivations bool
}

// NewGGUF wraps the raw bytes of a [rows, cols] GGUF tensor of type dt
// (Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K or Q6_K) in place. cols must be a multiple of the
// block size (32, or 256 for the K formats).
func NewGGUF(dt tensor.DType, rows, cols int, data []byte) (*GGUF, error) {
	n, err := checkShape(rows, cols)
	if err != nil {
		return nil, err
	}
	switch dt {
	case tensor.Q8_0, tensor.Q4_0, tensor.Q2_K, tensor.Q3_K, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K:
	default:
		return nil, fmt.Errorf("kernels: GGUF weights of type %v are not supported", dt)
	}
	if cols%dt.BlockElems() != 0 {
		return nil, fmt.Errorf("kernels: %d columns is not a multiple of the %v block size %d", cols, dt, dt.BlockElems())
	}
	size, err := dt.ByteSize(int64(n))
	if err != nil {
		return nil, err
	}
	if err := checkLen(dt.String()+" weights", len(data), int(size)); err != nil {
		return nil, err
	}
	return &GGUF{dt: dt, rows: rows, cols: cols, data: data, rowBytes: int(size) / rows}, nil
}

// Rows is the number of output features.
func (g *GGUF) Rows() int { return g.rows }

// Cols is the number of input features.
func (g *GGUF) Cols() int { return g.cols }

// DType is the block format.
func (g *GGUF) DType() tensor.DType { return g.dt }

// Bytes is the size of the weight data.
func (g *GGUF) Bytes() int { return len(g.data) }

func (g *GGUF) prepare(_ *impl, x []float32, batch int, a *actBuf) {
	a.x, a.batch, a.cols = x, batch, g.cols
	if g.ExactActivations {
		return
	}
	n := batch * g.cols
	a.q8.q = grow(a.q8.q, n)
	a.q8.d = grow(a.q8.d, n/q8Block)
	a.q8.s = grow(a.q8.s, n/q8Block)
}

func (g *GGUF) prepareRows(k *impl, a *actBuf, b0, b1 int) {
	if g.ExactActivations {
		return
	}
	for b := b0; b < b1; b++ {
		k.quantizeQ8(a.q8Row(b), a.x[b*g.cols:(b+1)*g.cols])
	}
}

func (a *actBuf) q8Row(b int) q8Row {
	n, nb := a.cols, a.cols/q8Block
	return q8Row{q: a.q8.q[b*n : (b+1)*n], d: a.q8.d[b*nb : (b+1)*nb], s: a.q8.s[b*nb : (b+1)*nb]}
}

func (g *GGUF) mulRows(k *impl, a *actBuf, dst []float32, r0, r1 int, sc *scratch) {
	if g.ExactActivations {
		wf := sc.floats(g.cols)
		for o := r0; o < r1; o++ {
			g.dequantRow(wf, o)
			for b := 0; b < a.batch; b++ {
				dst[b*g.rows+o] = k.dotF32(a.x[b*g.cols:(b+1)*g.cols], wf)
			}
		}
		return
	}
	var dot func(q8Row, []byte) float32
	var dot4 func(q8Row, int, []byte, *[4]float32)
	var rows func(q8Row, []byte, []float32)
	var rows4 func(q8Row, int, []byte, []float32, int)
	switch g.dt {
	case tensor.Q8_0:
		dot, dot4 = k.q8_0, k.q8_04
	case tensor.Q4_0:
		dot = k.q4_0
	case tensor.Q4_K:
		dot, dot4, rows, rows4 = k.q4K, k.q4K4, k.q4KRows, k.q4K4Rows
	case tensor.Q6_K:
		dot, dot4, rows, rows4 = k.q6K, k.q6K4, k.q6KRows, k.q6K4Rows
	case tensor.Q2_K:
		dot = k.q2K
	case tensor.Q3_K:
		dot = k.q3K
	case tensor.Q5_K:
		dot = k.q5K
	}
	// Tiles of batchTile activation rows, the weight rows streaming past
	// each: the tile stays in L1 and the chunk of weight rows in L2.
	for b0 := 0; b0 < a.batch; b0 += batchTile {
		b1 := min(b0+batchTile, a.batch)
		if dot4 != nil && b1-b0 == 4 {
			n, nb := g.cols, g.cols/q8Block
			x := q8Row{q: a.q8.q[b0*n : b1*n], d: a.q8.d[b0*nb : b1*nb], s: a.q8.s[b0*nb : b1*nb]}
			w := g.data[r0*g.rowBytes : r1*g.rowBytes]
			if rows4 != nil {
				rows4(x, g.cols, w, dst[b0*g.rows+r0:], g.rows)
				continue
			}
			var out [4]float32
			d0 := dst[b0*g.rows : (b0+1)*g.rows][r0:r1]
			d1 := dst[(b0+1)*g.rows : (b0+2)*g.rows][r0:r1]
			d2 := dst[(b0+2)*g.rows : (b0+3)*g.rows][r0:r1]
			d3 := dst[(b0+3)*g.rows : (b0+4)*g.rows][r0:r1]
			for i := range d0 {
				dot4(x, g.cols, w[i*g.rowBytes:(i+1)*g.rowBytes], &out)
				d0[i], d1[i], d2[i], d3[i] = out[0], out[1], out[2], out[3]
			}
			continue
		}
		if b1-b0 == 1 {
			x := a.q8Row(b0)
			d := dst[b0*g.rows : (b0+1)*g.rows]
			if rows != nil {
				rows(x, g.data[r0*g.rowBytes:r1*g.rowBytes], d[r0:r1])
				continue
			}
			for o := r0; o < r1; o++ {
				d[o] = dot(x, g.data[o*g.rowBytes:(o+1)*g.rowBytes])
			}
			continue
		}
		for o := r0; o < r1; o++ {
			w := g.data[o*g.rowBytes : (o+1)*g.rowBytes]
			for b := b0; b < b1; b++ {
				dst[b*g.rows+o] = dot(a.q8Row(b), w)
			}
		}
	}
}

// batchTile is the number of activation rows a batched product keeps in
// cache while it streams the weight rows; the 4-row kernels rely on it
// being 4.
const batchTile = 4

func (g *GGUF) dequantRow(dst []float32, r int) {
	w := g.data[r*g.rowBytes : (r+1)*g.rowBytes]
	switch g.dt {
	case tensor.Q2_K, tensor.Q3_K, tensor.Q5_K:
		// ggml's reference dequantizers, which engine/gguf holds
		// (bit-exact against the gguf Python package).
		if err := gguf.DequantizeRow(g.dt, w, dst); err != nil {
			panic(err) // the lengths were checked by NewGGUF
		}
	case tensor.Q8_0:
		for b := 0; b < len(dst)/32; b++ {
			blk := w[b*q8_0Bytes:]
			d := f16(blk)
			for i := 0; i < 32; i++ {
				dst[32*b+i] = d * float32(int8(blk[2+i]))
			}
		}
	case tensor.Q4_0:
		for b := 0; b < len(dst)/32; b++ {
			blk := w[b*q4_0Bytes:]
			d := f16(blk)
			for i := 0; i < 16; i++ {
				dst[32*b+i] = d * float32(int32(blk[2+i]&15)-8)
				dst[32*b+16+i] = d * float32(int32(blk[2+i]>>4)-8)
			}
		}
	case tensor.Q4_K:
		for sb := 0; sb < len(dst)/kBlock; sb++ {
			blk := w[sb*q4KBytes:]
			d, dmin := f16(blk), f16(blk[2:])
			sc, mn := kScaleMin(blk[4:16])
			y := dst[sb*kBlock:]
			for j := 0; j < 4; j++ {
				d1, m1 := d*float32(sc[2*j]), dmin*float32(mn[2*j])
				d2, m2 := d*float32(sc[2*j+1]), dmin*float32(mn[2*j+1])
				q := blk[16+32*j:]
				for l := 0; l < 32; l++ {
					y[64*j+l] = float32(d1*float32(q[l]&15)) - m1
					y[64*j+32+l] = float32(d2*float32(q[l]>>4)) - m2
				}
			}
		}
	case tensor.Q6_K:
		for sb := 0; sb < len(dst)/kBlock; sb++ {
			blk := w[sb*q6KBytes:]
			d := tensor.F16ToF32(binary.LittleEndian.Uint16(blk[208:]))
			for n := 0; n < 2; n++ {
				ql, qh, sc := blk[64*n:], blk[128+32*n:], blk[192+8*n:]
				y := dst[sb*kBlock+128*n:]
				for l := 0; l < 32; l++ {
					h := l / 16
					y[l] = d * float32(int8(sc[h])) * float32(int32(ql[l]&15|(qh[l]&3)<<4)-32)
					y[l+32] = d * float32(int8(sc[h+2])) * float32(int32(ql[l+32]&15|(qh[l]>>2&3)<<4)-32)
					y[l+64] = d * float32(int8(sc[h+4])) * float32(int32(ql[l]>>4|(qh[l]>>4&3)<<4)-32)
					y[l+96] = d * float32(int8(sc[h+6])) * float32(int32(ql[l+32]>>4|(qh[l]>>6)<<4)-32)
				}
			}
		}
	}
}
