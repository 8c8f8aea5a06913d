package cpu

import (
	"fmt"
	"math"

	"fusion/engine/backend"
)

// ropeKey identifies a cos/sin table: one per RoPE and batch in a step,
// shared by the q and k of every layer.
type ropeKey struct {
	r *backend.RoPE
	b *backend.Batch
}

// RoPE rotates each head of each row by the row's position.
func (s *step) RoPE(x backend.Array, r *backend.RoPE, b *backend.Batch) backend.Array {
	a := arr(x)
	hd, half := r.HeadDim, r.Dims/2
	if hd <= 0 || r.Dims <= 0 || r.Dims%2 != 0 || r.Dims > hd || a.cols%hd != 0 {
		panic(fmt.Sprintf("cpu: RoPE: dims %d, head dim %d, row of %d", r.Dims, hd, a.cols))
	}
	if b.Rows() != a.rows {
		panic(fmt.Sprintf("cpu: RoPE: %d rows, batch has %d", a.rows, b.Rows()))
	}
	table := s.ropeTable(r, b)
	in := r.InputScale
	if in == 0 {
		in = 1
	}
	out := s.new(a.rows, a.cols)
	s.b.parallelRows(a.rows, elementwiseRows(a.cols), func(lo, hi int) {
		for t := lo; t < hi; t++ {
			cs := table[t*2*half : (t+1)*2*half]
			cos, sin := cs[:half], cs[half:]
			src, dst := a.row(t), out.row(t)
			for h := 0; h < a.cols; h += hd {
				rotate(dst[h:h+hd], src[h:h+hd], cos, sin, in, r.Dims, r.Traditional)
			}
		}
	})
	return out
}

// rotate applies the rotation to one head, as mlx's fast.rope fallback
// does in float32: x1·cos − x2·sin, x1·sin + x2·cos.
func rotate(dst, src, cos, sin []float32, scale float32, dims int, traditional bool) {
	half := dims / 2
	for i := range half {
		var i1, i2 int
		if traditional {
			i1, i2 = 2*i, 2*i+1
		} else {
			i1, i2 = i, i+half
		}
		x1, x2 := src[i1], src[i2]
		if scale != 1 {
			x1, x2 = x1*scale, x2*scale
		}
		dst[i1] = x1*cos[i] - x2*sin[i]
		dst[i2] = x1*sin[i] + x2*cos[i]
	}
	copy(dst[dims:], src[dims:])
}

// ropeTable returns, for each row of b, cos θ_i then sin θ_i for i <
// Dims/2, θ_i = ((offset + j)·scale)·f_i in float32.
func (s *step) ropeTable(r *backend.RoPE, b *backend.Batch) []float32 {
	key := ropeKey{r, b}
	if t, ok := s.ropes[key]; ok {
		return t
	}
	half := r.Dims / 2
	inv := invFreqs(r)
	scale := r.Scale
	if scale == 0 {
		scale = 1
	}
	table := make([]float32, b.Rows()*2*half)
	row := 0
	for _, sq := range b.Seqs {
		for j := range sq.Len {
			p := (float32(j) + float32(sq.Offset)) * scale
			cs := table[row*2*half : (row+1)*2*half]
			for i, f := range inv {
				theta := float64(p * f)
				cs[i] = float32(math.Cos(theta))
				cs[half+i] = float32(math.Sin(theta))
			}
			row++
		}
	}
	if s.ropes == nil {
		s.ropes = make(map[ropeKey][]float32)
	}
	s.ropes[key] = table
	return table
}

// invFreqs are the inverse frequencies as mlx computes them in float32:
// 1/freqs, or exp(−i·(log(base)/(dims/2))).
func invFreqs(r *backend.RoPE) []float32 {
	half := r.Dims / 2
	inv := make([]float32, half)
	if r.Freqs != nil {
		if len(r.Freqs) != half {
			panic(fmt.Sprintf("cpu: RoPE: %d freqs for %d dims", len(r.Freqs), r.Dims))
		}
		for i, f := range r.Freqs {
			inv[i] = 1 / f
		}
		return inv
	}
	c := float32(math.Log(float64(float32(r.Base)))) / float32(half)
	for i := range inv {
		inv[i] = float32(math.Exp(float64(-float32(i) * c)))
	}
	return inv
}
