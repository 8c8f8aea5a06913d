package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"fusion/engine/tensor"
	"fusion/internal/race"
)

// Dense is an unquantized weight matrix: F32, BF16 or F16 elements,
// little-endian, row-major. BF16 and F16 are widened on the fly.
type Dense struct {
	dt         tensor.DType
	rows, cols int
	data       []byte
	rowBytes   int
}

// NewDense wraps the raw little-endian bytes of a [rows, cols] matrix of
// F32, BF16 or F16 elements. data is used in place, not copied; it must
// not change while the weights are in use.
func NewDense(dt tensor.DType, rows, cols int, data []byte) (*Dense, error) {
	n, err := checkShape(rows, cols)
	if err != nil {
		return nil, err
	}
	var es int
	switch dt {
	case tensor.F32:
		es = 4
	case tensor.BF16, tensor.F16:
		es = 2
	default:
		return nil, fmt.Errorf("kernels: dense weights of type %v are not supported", dt)
	}
	if err := checkLen(dt.String()+" weights", len(data), n*es); err != nil {
		return nil, err
	}
	return &Dense{dt: dt, rows: rows, cols: cols, data: data, rowBytes: cols * es}, nil
}

// NewF32 wraps a row-major [rows, cols] f32 matrix, in place.
func NewF32(rows, cols int, data []float32) (*Dense, error) {
	var b []byte
	if len(data) > 0 {
		b = unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), 4*len(data))
	}
	return NewDense(tensor.F32, rows, cols, b)
}

// Rows is the number of output features.
func (d *Dense) Rows() int { return d.rows }

// Cols is the number of input features.
func (d *Dense) Cols() int { return d.cols }

// DType is the element type.
func (d *Dense) DType() tensor.DType { return d.dt }

// Bytes is the size of the weight data.
func (d *Dense) Bytes() int { return len(d.data) }

func (d *Dense) prepare(_ *impl, x []float32, batch int, a *actBuf) {
	a.x, a.batch, a.cols = x, batch, d.cols
}

func (d *Dense) prepareRows(*impl, *actBuf, int, int) {}

func (d *Dense) mulRows(k *impl, a *actBuf, dst []float32, r0, r1 int, _ *scratch) {
	if d.dt == tensor.BF16 && k.bf16Tile != nil {
		// The tiled loop is uninstrumented; the activations it reads
		// and this worker's rows of dst it writes are declared here.
		race.ReadRange(a.x[:a.batch*d.cols])
		for b := range a.batch {
			race.WriteRange(dst[b*d.rows+r0 : b*d.rows+r1])
		}
		d.mulRowsTiled(k, a, dst, r0, r1)
		return
	}
	dot, dot4 := k.dotF32B, k.dotF32B4
	switch d.dt {
	case tensor.BF16:
		dot, dot4 = k.dotBF16, k.dotBF164
	case tensor.F16:
		dot, dot4 = k.dotF16, k.dotF164
	}
	// Tiles of 4 activation rows: each weight row is read (and widened)
	// once per tile, and the tile stays in cache while the rows stream.
	var out [4]float32
	for b0 := 0; b0 < a.batch; b0 += 4 {
		if dot4 != nil && b0+4 <= a.batch {
			x := a.x[b0*d.cols : (b0+4)*d.cols]
			for o := r0; o < r1; o++ {
				dot4(x, d.cols, d.data[o*d.rowBytes:(o+1)*d.rowBytes], &out)
				for j, v := range out {
					dst[(b0+j)*d.rows+o] = v
				}
			}
			continue
		}
		for o := r0; o < r1; o++ {
			w := d.data[o*d.rowBytes : (o+1)*d.rowBytes]
			for b := b0; b < min(b0+4, a.batch); b++ {
				dst[b*d.rows+o] = dot(a.x[b*d.cols:(b+1)*d.cols], w)
			}
		}
	}
}

// mulRowsTiled runs k.bf16Tile over tiles of 4 weight rows (a partial
// last tile repeats its last row) by up to 4 activation rows: each weight
// tile is read from memory once and stays in cache while every group of
// activation rows passes over it, and the first group prefetches the
// next tile of this range.
//
// Under -race it runs uninstrumented (its per-tile bookkeeping was most
// of the CPU of every test generating over a real vocabulary's head): it
// reads the immutable weights and the activations, and writes rows r0 to
// r1 of dst, which this worker alone writes; mulRows declares those
// ranges to the race detector.
//
//go:norace
func (d *Dense) mulRowsTiled(k *impl, a *actBuf, dst []float32, r0, r1 int) {
	var (
		xs  [4][]float32
		ws  [4][]byte
		out [16]float32
	)
	for c0 := r0; c0 < r1; c0 += tiledChunk {
		c1 := min(c0+tiledChunk, r1)
		for b0 := 0; b0 < a.batch; {
			nx := min(4, a.batch-b0)
			for j := range nx {
				xs[j] = a.x[(b0+j)*d.cols : (b0+j+1)*d.cols]
			}
			for o0 := c0; o0 < c1; o0 += 4 {
				n := min(4, c1-o0)
				for i := range ws {
					o := o0 + min(i, n-1)
					ws[i] = d.data[o*d.rowBytes : (o+1)*d.rowBytes]
				}
				pf := 0
				if b0 == 0 && o0+4 < r1 {
					pf = 4 * d.rowBytes
				}
				k.bf16Tile(&xs, nx, &ws, &out, pf)
				for j := range nx {
					// Not copy: under -race it would declare each
					// 4-value range to the detector again.
					row := dst[(b0+j)*d.rows+o0 : (b0+j)*d.rows+o0+n]
					for i := range row {
						row[i] = out[4*j+i]
					}
				}
			}
			b0 += nx
		}
	}
}

// tiledChunk is the number of weight rows mulRowsTiled runs every group
// of activation rows over before the next rows: the group's rows stay in
// L1 across the chunk's tiles and the chunk stays in L2 for the next
// group.
const tiledChunk = 32

func (d *Dense) dequantRow(dst []float32, r int) {
	w := d.data[r*d.rowBytes : (r+1)*d.rowBytes]
	for i := range dst {
		switch d.dt {
		case tensor.F32:
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(w[4*i:]))
		case tensor.BF16:
			dst[i] = tensor.BF16ToF32(binary.LittleEndian.Uint16(w[2*i:]))
		case tensor.F16:
			dst[i] = tensor.F16ToF32(binary.LittleEndian.Uint16(w[2*i:]))
		}
	}
}
