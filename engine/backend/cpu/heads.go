package cpu

import "fusion/engine/backend"

// HeadSlice copies features [from, to) of every head of every row.
func (s *step) HeadSlice(x backend.Array, heads, from, to int) backend.Array {
	a := arr(x)
	w, err := backend.HeadSliceShape(a, heads, from, to)
	if err != nil {
		panic("cpu: " + err.Error())
	}
	n := to - from
	out := s.new(a.rows, heads*n)
	for r := range a.rows {
		src, dst := a.row(r), out.row(r)
		for h := range heads {
			copy(dst[h*n:(h+1)*n], src[h*w+from:h*w+to])
		}
	}
	return out
}

// HeadConcat puts head h of b after head h of a, for every head.
func (s *step) HeadConcat(x, y backend.Array, heads int) backend.Array {
	a, b := arr(x), arr(y)
	wa, wb, err := backend.HeadConcatShape(a, b, heads)
	if err != nil {
		panic("cpu: " + err.Error())
	}
	w := wa + wb
	out := s.new(a.rows, heads*w)
	for r := range a.rows {
		sa, sb, dst := a.row(r), b.row(r), out.row(r)
		for h := range heads {
			copy(dst[h*w:h*w+wa], sa[h*wa:(h+1)*wa])
			copy(dst[h*w+wa:(h+1)*w], sb[h*wb:(h+1)*wb])
		}
	}
	return out
}

// HeadLinear gathers each head's features into a block, multiplies it by
// the head's matrix as Linear does, and puts the result in the head's
// columns. A row's values do not depend on the other rows.
func (s *step) HeadLinear(x backend.Array, ws []backend.Weight) backend.Array {
	a := arr(x)
	o, in, err := backend.HeadLinearShape(a, ws)
	if err != nil {
		panic("cpu: " + err.Error())
	}
	heads := len(ws)
	out := s.new(a.rows, heads*o)
	block := s.new(a.rows, in)
	for h, w := range ws {
		for r := range a.rows {
			copy(block.row(r), a.row(r)[h*in:(h+1)*in])
		}
		y := arr(s.Linear(block, w))
		for r := range a.rows {
			copy(out.row(r)[h*o:(h+1)*o], y.row(r))
		}
	}
	return out
}
