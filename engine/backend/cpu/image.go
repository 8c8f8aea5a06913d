package cpu

import (
	"fmt"
	"math"

	"fusion/engine/backend"
)

// Conv2D gathers the receptive fields of a chunk of output pixels into
// rows (k·k input pixels side by side, zeros outside the image: im2col)
// and multiplies the chunk by the weight on the pool, as Linear does; the
// chunk bounds the gathered copy to linearRows rows.
func (s *step) Conv2D(x backend.Array, w backend.Weight, height, width, kernel, pad int) backend.Array {
	a, m := arr(x), wt(w)
	oh, ow, err := backend.Conv2DShape(a, w, height, width, kernel, pad)
	if err != nil {
		panic("cpu: " + err.Error())
	}
	c, in, o := a.cols, m.In(), m.Out()
	rows := oh * ow
	out := s.new(rows, o)
	col := make([]float32, min(linearRows, rows)*in)
	for r := 0; r < rows; r += linearRows {
		n := min(linearRows, rows-r)
		for p := range n {
			y, xx := (r+p)/ow, (r+p)%ow
			dst := col[p*in : (p+1)*in]
			for i := range kernel {
				sy := y + i - pad
				for j := range kernel {
					tap := dst[(i*kernel+j)*c : (i*kernel+j+1)*c]
					sx := xx + j - pad
					if sy < 0 || sy >= height || sx < 0 || sx >= width {
						clear(tap)
					} else {
						copy(tap, a.row(sy*width+sx))
					}
				}
			}
		}
		s.b.pool.MatMul(out.data[r*o:(r+n)*o], col[:n*in], n, m.w)
	}
	if m.bias != nil {
		s.b.parallelRows(rows, elementwiseRows(o), func(lo, hi int) {
			for r := lo; r < hi; r++ {
				s.b.k.Add(out.row(r), out.row(r), m.bias)
			}
		})
	}
	return out
}

// GroupNorm takes each group's mean and variance over all pixels in
// float64 (one group per task), then normalizes and applies the affine
// weights row by row.
func (s *step) GroupNorm(x backend.Array, groups int, w, bias backend.Vector, eps float32) backend.Array {
	a := arr(x)
	wv, ok1 := w.(*vector)
	bv, ok2 := bias.(*vector)
	if !ok1 || !ok2 {
		panic(fmt.Sprintf("cpu: GroupNorm: vectors of another backend (%T, %T)", w, bias))
	}
	if err := backend.GroupNormShape(a, groups, w, bias); err != nil {
		panic("cpu: " + err.Error())
	}
	cg := a.cols / groups
	// Per channel: the scale inv·w and the shift b − mean·inv·w.
	scale, shift := make([]float32, a.cols), make([]float32, a.cols)
	s.b.parallel(groups, func(_, g int) {
		lo, hi := g*cg, (g+1)*cg
		var sum float64
		for r := range a.rows {
			for _, v := range a.row(r)[lo:hi] {
				sum += float64(v)
			}
		}
		n := float64(a.rows * cg)
		mean := sum / n
		var sq float64
		for r := range a.rows {
			for _, v := range a.row(r)[lo:hi] {
				d := float64(v) - mean
				sq += d * d
			}
		}
		inv := 1 / math.Sqrt(sq/n+float64(eps))
		for ch := lo; ch < hi; ch++ {
			k := inv * float64(wv.v[ch])
			scale[ch] = float32(k)
			shift[ch] = float32(float64(bv.v[ch]) - mean*k)
		}
	})
	out := s.new(a.rows, a.cols)
	s.b.parallelRows(a.rows, elementwiseRows(a.cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			dst := out.row(r)
			for ch, v := range a.row(r) {
				dst[ch] = v*scale[ch] + shift[ch]
			}
		}
	})
	return out
}

// Upsample2x copies every input row to the four rows of its 2×2 block.
func (s *step) Upsample2x(x backend.Array, height, width int) backend.Array {
	a := arr(x)
	if err := backend.Upsample2xShape(a, height, width); err != nil {
		panic("cpu: " + err.Error())
	}
	out := s.new(4*a.rows, a.cols)
	s.b.parallelRows(2*height, elementwiseRows(2*width*a.cols), func(lo, hi int) {
		for y := lo; y < hi; y++ {
			for xx := range 2 * width {
				copy(out.row(y*2*width+xx), a.row((y/2)*width+xx/2))
			}
		}
	})
	return out
}
