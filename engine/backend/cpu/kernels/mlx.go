package kernels

import (
	"encoding/binary"
	"fmt"
	"math"

	"fusion/engine/tensor"
)

// MLXAffine is an MLX affine-quantized weight matrix (mlx-lm's quantized
// Linear and Embedding): codes packed little-endian along each row into
// uint32 words, [rows, cols·bits/32], and per-group scales and biases
// [rows, cols/group] in BF16, F16 or F32; w[o][i] = scales[o][g]·q + biases[o][g]
// with g = i/group.
//
// Scales and biases are kept in their stored type and widened to f32 a
// few rows at a time (into per-worker scratch) inside the product, so no
// f32 copy of them is kept.
type MLXAffine struct {
	rows, cols, bits, group int
	w                       []byte
	scales, biases          []byte
	sdt                     tensor.DType
	rowBytes                int
	groups                  int // per row
	scaleBytes              int // bytes per scale or bias
}

// NewMLXAffine wraps MLX affine-quantized weights in place: packed is the
// raw bytes of the uint32 weight tensor, scales and biases the raw bytes
// of the scale and bias tensors of type sdt. bits is 2, 3, 4, 5, 6 or 8
// (4 and 8 have SIMD kernels), group 32, 64 or 128, and cols a multiple
// of group.
func NewMLXAffine(rows, cols, bits, group int, packed, scales, biases []byte, sdt tensor.DType) (*MLXAffine, error) {
	n, err := checkShape(rows, cols)
	if err != nil {
		return nil, err
	}
	switch bits {
	case 2, 3, 4, 5, 6, 8:
	default:
		return nil, fmt.Errorf("kernels: MLX affine bits %d not supported", bits)
	}
	switch group {
	case 32, 64, 128:
	default:
		return nil, fmt.Errorf("kernels: MLX group size %d not supported", group)
	}
	if cols%group != 0 {
		return nil, fmt.Errorf("kernels: %d columns is not a multiple of the group size %d", cols, group)
	}
	var es int
	switch sdt {
	case tensor.F32:
		es = 4
	case tensor.BF16, tensor.F16:
		es = 2
	default:
		return nil, fmt.Errorf("kernels: MLX scales of type %v are not supported", sdt)
	}
	ng := n / group
	if err := checkLen("MLX packed weights", len(packed), n/8*bits); err != nil {
		return nil, err
	}
	if err := checkLen("MLX scales", len(scales), ng*es); err != nil {
		return nil, err
	}
	if err := checkLen("MLX biases", len(biases), ng*es); err != nil {
		return nil, err
	}
	return &MLXAffine{
		rows: rows, cols: cols, bits: bits, group: group,
		w: packed, scales: scales, biases: biases, sdt: sdt,
		rowBytes: cols / 8 * bits, groups: cols / group, scaleBytes: es,
	}, nil
}

// Rows is the number of output features.
func (m *MLXAffine) Rows() int { return m.rows }

// Cols is the number of input features.
func (m *MLXAffine) Cols() int { return m.cols }

// Bits is the code width.
func (m *MLXAffine) Bits() int { return m.bits }

// GroupSize is the number of elements sharing a scale and bias.
func (m *MLXAffine) GroupSize() int { return m.group }

// Bytes is the size of codes, scales and biases.
func (m *MLXAffine) Bytes() int { return len(m.w) + len(m.scales) + len(m.biases) }

// widen converts n scale-type values from p into dst.
func widen(dst []float32, p []byte, dt tensor.DType) {
	switch dt {
	case tensor.BF16:
		for i := range dst {
			dst[i] = tensor.BF16ToF32(binary.LittleEndian.Uint16(p[2*i:]))
		}
	case tensor.F16:
		for i := range dst {
			dst[i] = tensor.F16ToF32(binary.LittleEndian.Uint16(p[2*i:]))
		}
	default:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(p[4*i:]))
		}
	}
}

func (m *MLXAffine) rowScales(r int, s, b []float32) {
	n := m.groups * m.scaleBytes
	widen(s, m.scales[r*n:(r+1)*n], m.sdt)
	widen(b, m.biases[r*n:(r+1)*n], m.sdt)
}

func (m *MLXAffine) prepare(k *impl, x []float32, batch int, a *actBuf) {
	a.x, a.batch, a.cols = x, batch, m.cols
	tiles := m.dequantTiles(k)
	a.xp = a.xp[:0]
	if tiles || (m.bits == 4 && k.mlx4Perm) {
		a.xp = grow(a.xp, batch*m.cols)
	}
	if !tiles {
		a.xsum = grow(a.xsum, batch*m.groups)
	}
}

func (m *MLXAffine) prepareRows(k *impl, a *actBuf, b0, b1 int) {
	x := a.x
	if m.dequantTiles(k) {
		// Only the permuted rows, the partial last chunk in order.
		for b := b0; b < b1; b++ {
			xr, pr := x[b*m.cols:(b+1)*m.cols], a.xp[b*m.cols:(b+1)*m.cols]
			mlxPermute(pr, xr)
			full := m.cols &^ 127
			copy(pr[full:], xr[full:])
		}
		return
	}
	ng := m.groups
	for b := b0; b < b1; b++ {
		xr := x[b*m.cols : (b+1)*m.cols]
		for g := 0; g < ng; g++ {
			var s float32
			for _, v := range xr[g*m.group : (g+1)*m.group] {
				s += v
			}
			a.xsum[b*ng+g] = s
		}
	}
	if len(a.xp) > 0 {
		for b := b0; b < b1; b++ {
			mlxPermute(a.xp[b*m.cols:(b+1)*m.cols], x[b*m.cols:(b+1)*m.cols])
		}
	}
}

// mlxPermute lays x out for the AVX-512 4-bit kernel: within each full
// chunk of 128 elements (16 words of 8 codes), dst[16k+d] = x[8d+k], so
// that shifting all 16 words right by 4k lines code k of every word up
// with 16 consecutive dst values. A partial last chunk is left unset.
func mlxPermute(dst, x []float32) {
	for c := 0; c+128 <= len(x); c += 128 {
		for d := 0; d < 16; d++ {
			for k := 0; k < 8; k++ {
				dst[c+16*k+d] = x[c+8*d+k]
			}
		}
	}
}

// mlxTile is how many rows' scales and biases are widened at once.
const mlxTile = 16

func (m *MLXAffine) mulRows(k *impl, a *actBuf, dst []float32, r0, r1 int, sc *scratch) {
	if m.dequantTiles(k) {
		if a.batch < 4 && k.mlx4Fused != nil && m.cols%128 == 0 && r1-r0 >= 4 {
			m.mulRowsFused(k, a, dst, r0, r1, sc)
			return
		}
		m.mulRowsDequant(k, a, dst, r0, r1, sc)
		return
	}
	ng := m.groups
	n := ng * m.scaleBytes
	// The AVX-512 4-bit kernel reads up to 3 floats past a row's scales.
	f := sc.floats(2*mlxTile*ng + 4)
	for t0 := r0; t0 < r1; t0 += mlxTile {
		t1 := min(t0+mlxTile, r1)
		nt := (t1 - t0) * ng
		ts, tb := f[:nt], f[nt:2*nt]
		m.widen(k, ts, m.scales[t0*n:t1*n])
		m.widen(k, tb, m.biases[t0*n:t1*n])
		for b0 := 0; b0 < a.batch; b0 += batchTile {
			if m.bits == 8 && k.mlx8x4 != nil && b0+4 <= a.batch {
				var out [4]float32
				x := a.x[b0*m.cols : (b0+4)*m.cols]
				xsum := a.xsum[b0*ng : (b0+4)*ng]
				for o := t0; o < t1; o++ {
					s := ts[(o-t0)*ng : (o-t0+1)*ng]
					bs := tb[(o-t0)*ng : (o-t0+1)*ng]
					k.mlx8x4(x, m.cols, m.w[o*m.rowBytes:(o+1)*m.rowBytes], s, bs, xsum, m.group, &out)
					for j, v := range out {
						dst[(b0+j)*m.rows+o] = v
					}
				}
				continue
			}
			for o := t0; o < t1; o++ {
				s := ts[(o-t0)*ng : (o-t0+1)*ng]
				bs := tb[(o-t0)*ng : (o-t0+1)*ng]
				w := m.w[o*m.rowBytes : (o+1)*m.rowBytes]
				for b := b0; b < min(b0+batchTile, a.batch); b++ {
					x := a.x[b*m.cols : (b+1)*m.cols]
					xsum := a.xsum[b*ng : (b+1)*ng]
					var v float32
					switch m.bits {
					case 4:
						var xp []float32
						if len(a.xp) > 0 {
							xp = a.xp[b*m.cols : (b+1)*m.cols]
						}
						v = k.mlx4(x, xp, w, s, bs, xsum, m.group)
					case 8:
						v = k.mlx8(x, w, s, bs, xsum, m.group)
					default:
						v = mlxBitsGeneric(x, w, s, m.group, m.bits) + k.dotF32(bs, xsum)
					}
					dst[b*m.rows+o] = v
				}
			}
		}
	}
}

// dequantTiles reports whether products use mulRowsDequant.
func (m *MLXAffine) dequantTiles(k *impl) bool {
	return m.bits == 4 && k.mlx4Dequant != nil && k.f32Tile != nil
}

// mulRowsDequant dequantizes 4 weight rows at a time into f32 scratch
// (which stays in cache) and multiplies every activation row by them with
// k.f32Tile, up to 4 at a time: the codes are decoded once per product
// whatever the batch, and each output is bit-identical whatever the
// batch or tile it was computed in.
func (m *MLXAffine) mulRowsDequant(k *impl, a *actBuf, dst []float32, r0, r1 int, sc *scratch) {
	ng := m.groups
	n := ng * m.scaleBytes
	f := sc.floats(4*m.cols + 8*ng + 4) // mlx4Dequant reads 3 floats past b
	sb := f[4*m.cols:]
	var (
		xs  [4][]float32
		ws  [4][]float32
		out [16]float32
	)
	for o0 := r0; o0 < r1; o0 += 4 {
		nr := min(4, r1-o0)
		s, b := sb[:nr*ng], sb[4*ng:4*ng+nr*ng]
		m.widen(k, s, m.scales[o0*n:(o0+nr)*n])
		m.widen(k, b, m.biases[o0*n:(o0+nr)*n])
		for i := range ws {
			if i >= nr {
				ws[i] = ws[nr-1]
				continue
			}
			ws[i] = f[i*m.cols : (i+1)*m.cols]
			o := o0 + i
			k.mlx4Dequant(ws[i], m.w[o*m.rowBytes:(o+1)*m.rowBytes], s[i*ng:(i+1)*ng], b[i*ng:(i+1)*ng], m.group)
		}
		for b0 := 0; b0 < a.batch; {
			nx := min(4, a.batch-b0)
			for j := range nx {
				xs[j] = a.xp[(b0+j)*m.cols : (b0+j+1)*m.cols]
			}
			k.f32Tile(&xs, nx, &ws, &out)
			for j := range nx {
				copy(dst[(b0+j)*m.rows+o0:(b0+j)*m.rows+o0+nr], out[4*j:4*j+nr])
			}
			b0 += nx
		}
	}
}

// mulRowsFused is mulRowsDequant for small batches, on k.mlx4Fused: 4
// weight rows at a time, dequantized in registers, their scales and
// biases widened mlxTile rows at a time. A partial last group of 4 is
// moved back to overlap the one before, recomputing the same values.
func (m *MLXAffine) mulRowsFused(k *impl, a *actBuf, dst []float32, r0, r1 int, sc *scratch) {
	ng := m.groups
	n := ng * m.scaleBytes
	f := sc.floats(2*mlxTile*ng + 4) // mlx4Fused reads 3 floats past b
	var out [4]float32
	for t0 := r0; t0 < r1; t0 += mlxTile {
		t1 := min(t0+mlxTile, r1)
		lo := min(t0, t1-4) // r1-r0 >= 4
		nt := (t1 - lo) * ng
		ts, tb := f[:nt], f[mlxTile*ng:mlxTile*ng+nt]
		m.widen(k, ts, m.scales[lo*n:t1*n])
		m.widen(k, tb, m.biases[lo*n:t1*n])
		for o0 := lo; o0 < t1; o0 += 4 {
			o0 := min(o0, t1-4)
			s, b := ts[(o0-lo)*ng:], tb[(o0-lo)*ng:]
			for j := 0; j < a.batch; j++ {
				k.mlx4Fused(a.xp[j*m.cols:(j+1)*m.cols], m.w[o0*m.rowBytes:(o0+4)*m.rowBytes], m.rowBytes, s, b, ng, m.group, &out)
				copy(dst[j*m.rows+o0:j*m.rows+o0+4], out[:])
			}
		}
	}
}

// widen converts stored scales or biases to f32.
func (m *MLXAffine) widen(k *impl, dst []float32, p []byte) {
	if m.sdt == tensor.F32 {
		widen(dst, p, m.sdt)
		return
	}
	k.widen(dst, p, m.sdt == tensor.BF16)
}

func (m *MLXAffine) dequantRow(dst []float32, r int) {
	s := make([]float32, 2*m.groups)
	m.rowScales(r, s[:m.groups], s[m.groups:])
	w := m.w[r*m.rowBytes : (r+1)*m.rowBytes]
	for i := range dst {
		g := i / m.group
		q := float32(mlxCode(w, m.bits, i))
		dst[i] = float32(s[g]*q) + s[m.groups+g]
	}
}
