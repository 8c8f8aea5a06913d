//go:build cgo

package mlx

import (
	"context"
	"fmt"
	"math"

	"fusion/engine/backend"
	"fusion/engine/tensor"
)

// node is an activation of a step: its shape is known when the op is
// recorded; its MLX array exists once the step has been flushed.
type node struct {
	rows, cols int
	build      func(a *Arena) *Array // makes x from the inputs' x
	x          *Array
	dead       bool // released: its handle is freed at the next flush
}

func (n *node) Rows() int { return n.rows }
func (n *node) Cols() int { return n.cols }

// step records ops and runs them on the MLX thread at Eval and Read.
type step struct {
	ctx     context.Context
	b       *Backend
	a       *Arena  // the step's arrays, used on the MLX thread only
	pending []*node // recorded, not built yet, in order
	live    []*node // the arena order Mark and Release see
	dead    []*node // released nodes whose arrays are built
	err     error
	closed  bool
}

var _ backend.Step = (*step)(nil)

func nd(x backend.Array) *node {
	n, ok := x.(*node)
	if !ok {
		panic(fmt.Sprintf("mlx: array of another backend (%T)", x))
	}
	if n.dead {
		panic("mlx: use of a released array")
	}
	return n
}

func wt(w backend.Weight) *weight {
	x, ok := w.(*weight)
	if !ok {
		panic(fmt.Sprintf("mlx: weight of another backend (%T)", w))
	}
	return x
}

// record adds an op producing a [rows, cols] float32 array.
func (s *step) record(rows, cols int, build func(a *Arena) *Array) *node {
	if s.closed {
		panic("mlx: op on a closed step")
	}
	n := &node{rows: rows, cols: cols, build: build}
	s.pending = append(s.pending, n)
	s.live = append(s.live, n)
	return n
}

// f32 converts x to float32 if MLX's type promotion left it narrower.
func f32(a *Arena, x *Array) *Array {
	if x.DType() == tensor.F32 || a.Err() != nil {
		return x
	}
	return a.AsType(x, tensor.F32)
}

// Input copies data into a new [rows, cols] array.
func (s *step) Input(rows, cols int, data []float32) backend.Array {
	if rows < 0 || cols < 0 || len(data) != rows*cols {
		panic(fmt.Sprintf("mlx: Input: %d values for [%d, %d]", len(data), rows, cols))
	}
	d := append([]float32(nil), data...)
	return s.record(rows, cols, func(a *Arena) *Array { return a.FromFloat32(d, rows, cols) })
}

// Embed gathers rows of table as float32 (affine rows dequantized).
func (s *step) Embed(table backend.Weight, ids []int32) backend.Array {
	w := wt(table)
	for _, id := range ids {
		if id < 0 || int(id) >= w.out {
			panic(fmt.Sprintf("mlx: Embed %s: token %d outside [0, %d)", w.name, id, w.out))
		}
	}
	idx := append([]int32(nil), ids...)
	return s.record(len(ids), w.in, func(a *Arena) *Array {
		i := a.FromInt32(idx, len(idx))
		if w.affine {
			// Scales and biases widened first: MLX dequantizes in the
			// scales' type, and bf16 rows would lose 16 bits that the
			// CPU backend (and quantized_matmul) keep.
			s, b := f32(a, a.Take(w.scales, i, 0)), f32(a, a.Take(w.biases, i, 0))
			return a.Dequantize(a.Take(w.w, i, 0), s, b, w.group, w.bits, tensor.F32)
		}
		return f32(a, a.Take(w.w, i, 0))
	})
}

// Linear computes x·Wᵀ + bias.
func (s *step) Linear(x backend.Array, w backend.Weight) backend.Array {
	in, m := nd(x), wt(w)
	if in.cols != m.in {
		panic(fmt.Sprintf("mlx: Linear %s: input has %d features, weight takes %d", m.name, in.cols, m.in))
	}
	return s.record(in.rows, m.out, func(a *Arena) *Array {
		var y *Array
		if m.affine {
			y = a.QuantizedMatmul(in.x, m.w, m.scales, m.biases, true, m.group, m.bits)
		} else {
			y = a.Matmul(in.x, a.Transpose(m.w, 1, 0))
		}
		y = f32(a, y)
		if m.bias != nil {
			y = a.Add(y, m.bias)
		}
		return y
	})
}

// RMSNorm normalizes each group of w.Len() features of every row.
func (s *step) RMSNorm(x backend.Array, w backend.Vector, eps float32) backend.Array {
	in := nd(x)
	v, ok := w.(*vector)
	if !ok {
		panic(fmt.Sprintf("mlx: vector of another backend (%T)", w))
	}
	if in.cols%v.n != 0 {
		panic(fmt.Sprintf("mlx: RMSNorm: %d features are not groups of %d", in.cols, v.n))
	}
	return s.record(in.rows, in.cols, func(a *Arena) *Array {
		y := a.RMSNorm(a.Reshape(in.x, in.rows, in.cols/v.n, v.n), v.v, eps)
		return a.Reshape(y, in.rows, in.cols)
	})
}

// LayerNorm normalizes every row, then scales by w and adds bias.
func (s *step) LayerNorm(x backend.Array, w, bias backend.Vector, eps float32) backend.Array {
	in := nd(x)
	wv, ok1 := w.(*vector)
	bv, ok2 := bias.(*vector)
	if !ok1 || !ok2 {
		panic(fmt.Sprintf("mlx: LayerNorm: vectors of another backend (%T, %T)", w, bias))
	}
	if wv.n != in.cols || bv.n != in.cols {
		panic(fmt.Sprintf("mlx: LayerNorm: %d features, weight %d, bias %d", in.cols, wv.n, bv.n))
	}
	return s.record(in.rows, in.cols, func(a *Arena) *Array { return a.LayerNorm(in.x, wv.v, bv.v, eps) })
}

// GELU returns x·(1 + erf(x/√2))/2.
func (s *step) GELU(x backend.Array) backend.Array {
	in := nd(x)
	return s.record(in.rows, in.cols, func(a *Arena) *Array {
		half, invSqrt2 := a.FromFloat32([]float32{0.5}, 1), a.FromFloat32([]float32{float32(1 / math.Sqrt2)}, 1)
		one := a.FromFloat32([]float32{1}, 1)
		cdf := a.Multiply(a.Add(a.Erf(a.Multiply(in.x, invSqrt2)), one), half)
		return a.Multiply(in.x, cdf)
	})
}

// EncoderAttention runs MLX's scaled dot-product attention without a mask
// per sequence of lens rows: every query sees its own sequence's keys.
func (s *step) EncoderAttention(q, k, v backend.Array, heads int, scale float32, lens []int) backend.Array {
	qa, ka, va := nd(q), nd(k), nd(v)
	hd, err := backend.EncoderShape(qa, ka, va, heads, lens)
	if err != nil {
		panic("mlx: " + err.Error())
	}
	seqs := append([]int(nil), lens...)
	return s.record(qa.rows, qa.cols, func(a *Arena) *Array {
		parts := make([]*Array, 0, len(seqs))
		row := 0
		for _, n := range seqs {
			y := a.Attention(seqHeads(a, qa.x, row, n, qa.cols, hd), seqHeads(a, ka.x, row, n, ka.cols, hd),
				seqHeads(a, va.x, row, n, va.cols, hd), scale, false)
			parts = append(parts, rowsOf(a, y, n, qa.cols))
			row += n
		}
		return a.Concatenate(parts, 0)
	})
}

// seqRows returns each sequence's rows of x [rows, cols] as [1, len,
// heads, hd] transposed to [1, heads, len, hd] (the layout of MLX's fast
// kernels: the sequence at axis −2).
func seqHeads(a *Arena, x *Array, row, n, cols, hd int) *Array {
	part := a.Slice(x, []int{row, 0}, []int{row + n, cols})
	return a.Transpose(a.Reshape(part, 1, n, cols/hd, hd), 0, 2, 1, 3)
}

// rowsOf is the inverse of seqHeads: [1, heads, len, hd] → [len, heads·hd].
func rowsOf(a *Arena, y *Array, n, cols int) *Array {
	return a.Reshape(a.Transpose(y, 0, 2, 1, 3), n, cols)
}

// RoPE rotates each head of each row by the row's position, one
// mlx fast.rope per sequence (its offset is a scalar).
func (s *step) RoPE(x backend.Array, r *backend.RoPE, b *backend.Batch) backend.Array {
	in := nd(x)
	hd := r.HeadDim
	if hd <= 0 || r.Dims <= 0 || r.Dims%2 != 0 || r.Dims > hd || in.cols%hd != 0 {
		panic(fmt.Sprintf("mlx: RoPE: dims %d, head dim %d, row of %d", r.Dims, hd, in.cols))
	}
	if b.Rows() != in.rows {
		panic(fmt.Sprintf("mlx: RoPE: %d rows, batch has %d", in.rows, b.Rows()))
	}
	if r.Freqs != nil && len(r.Freqs) != r.Dims/2 {
		panic(fmt.Sprintf("mlx: RoPE: %d freqs for %d dims", len(r.Freqs), r.Dims))
	}
	rope := *r
	seqs := append([]backend.Seq(nil), b.Seqs...)
	scale := r.Scale
	if scale == 0 {
		scale = 1
	}
	return s.record(in.rows, in.cols, func(a *Arena) *Array {
		var freqs, inScale *Array
		if rope.Freqs != nil {
			freqs = a.FromFloat32(rope.Freqs, len(rope.Freqs))
		}
		if rope.InputScale != 0 && rope.InputScale != 1 {
			v := make([]float32, hd)
			for i := range v {
				v[i] = 1
				if i < rope.Dims {
					v[i] = rope.InputScale
				}
			}
			inScale = a.FromFloat32(v, hd)
		}
		parts := make([]*Array, 0, len(seqs))
		row := 0
		for _, sq := range seqs {
			h := seqHeads(a, in.x, row, sq.Len, in.cols, hd)
			if inScale != nil {
				h = a.Multiply(h, inScale)
			}
			y := a.RoPE(h, rope.Dims, rope.Traditional, float32(rope.Base), scale, sq.Offset, freqs)
			parts = append(parts, rowsOf(a, y, sq.Len, in.cols))
			row += sq.Len
		}
		return a.Concatenate(parts, 0)
	})
}

// Attention writes k and v into each sequence's cache, then runs MLX's
// scaled dot-product attention per sequence over its cached positions
// (causal, aligned to the last key; GQA native).
func (s *step) Attention(layer int, q, k, v backend.Array, scale float32, b *backend.Batch) backend.Array {
	return s.attention(layer, q, k, v, scale, 0, b)
}

// attention is Attention, over the last window positions of each query
// if window > 0 (see windowAttend).
func (s *step) attention(layer int, q, k, v backend.Array, scale float32, window int, b *backend.Batch) backend.Array {
	qa, ka, va := nd(q), nd(k), nd(v)
	if b.Rows() != qa.rows || ka.rows != qa.rows || va.rows != qa.rows {
		panic(fmt.Sprintf("mlx: Attention: q, k, v have %d, %d, %d rows, batch %d", qa.rows, ka.rows, va.rows, b.Rows()))
	}
	if len(b.Seqs) == 0 {
		return s.record(0, qa.cols, func(a *Arena) *Array { return a.Zeros(tensor.F32, 0, qa.cols) })
	}
	spec := b.Seqs[0].Cache.Spec()
	hd, kvh := spec.HeadDim, spec.KVHeads
	if ka.cols != kvh*hd || va.cols != kvh*hd || qa.cols%(kvh*hd) != 0 {
		panic(fmt.Sprintf("mlx: Attention: q, k, v have %d, %d, %d features for %d KV heads of %d", qa.cols, ka.cols, va.cols, kvh, hd))
	}
	caches := make([]*KVCache, len(b.Seqs))
	seqs := append([]backend.Seq(nil), b.Seqs...)
	for i, sq := range seqs {
		c, ok := sq.Cache.(*KVCache)
		if !ok {
			panic(fmt.Sprintf("mlx: KV cache of another backend (%T)", sq.Cache))
		}
		if cs := c.Spec(); cs.KVHeads != kvh || cs.HeadDim != hd {
			panic("mlx: Attention: sequences with different KV cache shapes")
		}
		c.reserve(layer, sq.Offset, sq.Len)
		caches[i] = c
	}
	return s.record(qa.rows, qa.cols, func(a *Arena) *Array {
		parts := make([]*Array, 0, len(seqs))
		row := 0
		for i, sq := range seqs {
			keys, values := caches[i].write(a, layer, sq.Offset, seqHeads(a, ka.x, row, sq.Len, ka.cols, hd), seqHeads(a, va.x, row, sq.Len, va.cols, hd))
			var y *Array
			if window > 0 {
				y = windowAttend(a, seqHeads(a, qa.x, row, sq.Len, qa.cols, hd), keys, values, scale, window, sq, hd, kvh)
			} else {
				y = a.Attention(seqHeads(a, qa.x, row, sq.Len, qa.cols, hd), keys, values, scale, sq.Len > 1)
			}
			parts = append(parts, rowsOf(a, y, sq.Len, qa.cols))
			row += sq.Len
		}
		return a.Concatenate(parts, 0)
	})
}

func sameShape(op string, x, y *node) {
	if x.rows != y.rows || x.cols != y.cols {
		panic(fmt.Sprintf("mlx: %s: shapes [%d, %d] and [%d, %d] differ", op, x.rows, x.cols, y.rows, y.cols))
	}
}

// Add returns x + y.
func (s *step) Add(x, y backend.Array) backend.Array {
	p, q := nd(x), nd(y)
	sameShape("Add", p, q)
	return s.record(p.rows, p.cols, func(a *Arena) *Array { return a.Add(p.x, q.x) })
}

// SwiGLU returns silu(gate)·up = gate·sigmoid(gate)·up.
func (s *step) SwiGLU(gate, up backend.Array) backend.Array {
	g, u := nd(gate), nd(up)
	sameShape("SwiGLU", g, u)
	return s.record(g.rows, g.cols, func(a *Arena) *Array {
		return a.Multiply(a.Multiply(g.x, a.Sigmoid(g.x)), u.x)
	})
}

// Rows gathers rows of x.
func (s *step) Rows(x backend.Array, rows []int) backend.Array {
	in := nd(x)
	idx := make([]int32, len(rows))
	for i, r := range rows {
		if r < 0 || r >= in.rows {
			panic(fmt.Sprintf("mlx: Rows: row %d of %d", r, in.rows))
		}
		idx[i] = int32(r)
	}
	return s.record(len(rows), in.cols, func(a *Arena) *Array {
		return a.Take(in.x, a.FromInt32(idx, len(idx)), 0)
	})
}

// Mark is a position in the step's list of arrays.
func (s *step) Mark() backend.Mark { return backend.Mark(len(s.live)) }

// Release drops the arrays made since m except keep: their MLX arrays are
// freed at the next flush (the graph keeps what keep still needs).
func (s *step) Release(m backend.Mark, keep backend.Array) backend.Array {
	k := nd(keep)
	kept := false
	for _, n := range s.live[m:] {
		if n == k {
			kept = true
			continue
		}
		n.dead = true
		if n.x != nil {
			s.dead = append(s.dead, n)
		}
	}
	clear(s.live[m:])
	s.live = s.live[:m]
	if kept {
		s.live = append(s.live, k)
	}
	return k
}

// flush builds the pending ops, frees the arrays of released nodes, and
// runs then(a) on the MLX thread, all in one call.
func (s *step) flush(then func(a *Arena) error) error {
	if s.err != nil {
		return s.err
	}
	if s.closed {
		return fmt.Errorf("mlx: step closed")
	}
	pending, dead := s.pending, s.dead
	s.pending, s.dead = nil, nil
	err := s.b.rt.Do(s.ctx, func() error {
		a := s.a
		for _, n := range pending {
			m := a.Mark()
			x := n.build(a)
			if a.Err() != nil {
				return a.Err()
			}
			a.Release(m, x)
			n.x = x
			if n.dead {
				dead = append(dead, n)
			}
		}
		for _, n := range dead {
			a.Drop(n.x)
			n.x = nil
		}
		return then(a)
	})
	if err != nil {
		s.err = err
	}
	return err
}

func (s *step) arrays(xs []backend.Array) []*node {
	ns := make([]*node, len(xs))
	for i, x := range xs {
		ns[i] = nd(x)
	}
	return ns
}

// Eval builds and computes the arrays now.
func (s *step) Eval(xs ...backend.Array) error {
	ns := s.arrays(xs)
	return s.flush(func(a *Arena) error {
		arrays := make([]*Array, len(ns))
		for i, n := range ns {
			arrays[i] = n.x
		}
		return a.Eval(arrays...)
	})
}

// Read evaluates x and copies its values out.
func (s *step) Read(x backend.Array) ([]float32, error) {
	n := nd(x)
	var out []float32
	err := s.flush(func(a *Arena) error {
		var err error
		out, err = a.Float32(n.x)
		return err
	})
	return out, err
}

// Err is the step's first failure.
func (s *step) Err() error { return s.err }

// Close frees every array of the step.
func (s *step) Close() {
	if s.closed {
		return
	}
	s.closed = true
	s.pending, s.live, s.dead = nil, nil, nil
	// Freeing must happen even when the step's context is done.
	_ = s.b.rt.Do(context.Background(), func() error {
		s.a.Free()
		return nil
	})
}
