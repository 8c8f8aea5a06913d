//go:build cgo

package mlx

import (
	"context"
	"fmt"
	"math"

	"fusion/engine/backend"
	"fusion/engine/tensor"
)

// node is an activation of a step: its shape and type are known when the
// op is recorded; its MLX array exists once the step has been flushed.
type node struct {
	rows, cols int
	dt         tensor.DType          // the type build gives x
	build      func(a *Arena) *Array // makes x from the inputs' x
	x          *Array
	dead       bool // released: its handle is freed at the next flush
	// open: an Input whose type the first op using it decides (native
	// mode: a hidden state handed over by the previous stage takes the
	// type of the layer weights it meets, as it had there).
	open bool
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

// record adds an op producing a [rows, cols] array of type dt.
func (s *step) record(rows, cols int, dt tensor.DType, build func(a *Arena) *Array) *node {
	if s.closed {
		panic("mlx: op on a closed step")
	}
	n := &node{rows: rows, cols: cols, dt: dt, build: build}
	s.pending = append(s.pending, n)
	s.live = append(s.live, n)
	return n
}

// promote is MLX's result type of a binary op on floats of types x and y:
// the same type, or float32 when they differ (bf16 with f16 included).
func promote(x, y tensor.DType) tensor.DType {
	if x == y {
		return x
	}
	return tensor.F32
}

// use returns n for an op about to read it; an open Input takes dt (the
// type of the weight it meets) if it has not been built yet.
func use(n *node, dt tensor.DType) *node {
	if n.open {
		n.open = false
		if n.x == nil {
			n.dt = dt
		}
	}
	return n
}

// f32 converts x to float32 if MLX's type promotion left it narrower.
func f32(a *Arena, x *Array) *Array {
	if x.DType() == tensor.F32 || a.Err() != nil {
		return x
	}
	return a.AsType(x, tensor.F32)
}

// as converts x to dt unless it is dt already.
func as(a *Arena, x *Array, dt tensor.DType) *Array {
	if x.DType() == dt || a.Err() != nil {
		return x
	}
	return a.AsType(x, dt)
}

// Input copies data into a new [rows, cols] array: float32, or in native
// mode the type of the first weight it meets (values a previous stage
// computed in that type convert back exactly).
func (s *step) Input(rows, cols int, data []float32) backend.Array {
	if rows < 0 || cols < 0 || len(data) != rows*cols {
		panic(fmt.Sprintf("mlx: Input: %d values for [%d, %d]", len(data), rows, cols))
	}
	d := append([]float32(nil), data...)
	var n *node
	n = s.record(rows, cols, tensor.F32, func(a *Arena) *Array { return as(a, a.FromFloat32(d, rows, cols), n.dt) })
	n.open = !s.b.f32
	return n
}

// Embed gathers rows of table in the table's type (affine rows dequantized
// in the scales' type, as mlx.dequantize does), or as float32.
func (s *step) Embed(table backend.Weight, ids []int32) backend.Array {
	w := wt(table)
	for _, id := range ids {
		if id < 0 || int(id) >= w.out {
			panic(fmt.Sprintf("mlx: Embed %s: token %d outside [0, %d)", w.name, id, w.out))
		}
	}
	idx := append([]int32(nil), ids...)
	dt := w.dt
	if s.b.f32 {
		dt = tensor.F32
	}
	return s.record(len(ids), w.in, dt, func(a *Arena) *Array {
		i := a.FromInt32(idx, len(idx))
		if w.affine {
			// In float32 mode scales and biases are widened first: MLX
			// dequantizes in the scales' type, and bf16 rows would lose
			// 16 bits that the CPU backend (and quantized_matmul) keep.
			s, b := as(a, a.Take(w.scales, i, 0), dt), as(a, a.Take(w.biases, i, 0), dt)
			return a.Dequantize(a.Take(w.w, i, 0), s, b, w.group, w.bits, dt)
		}
		if w.fp != "" {
			return a.DequantizeMode(a.Take(w.w, i, 0), a.Take(w.scales, i, 0), nil, w.group, w.bits, dt, w.fp)
		}
		return as(a, a.Take(w.w, i, 0), dt)
	})
}

// Linear computes x·Wᵀ + bias, as mlx.nn.Linear (addmm when there is a
// bias) and QuantizedLinear (quantized_matmul, then the bias) do.
func (s *step) Linear(x backend.Array, w backend.Weight) backend.Array {
	m := wt(w)
	in := use(nd(x), m.dt)
	if in.cols != m.in {
		panic(fmt.Sprintf("mlx: Linear %s: input has %d features, weight takes %d", m.name, in.cols, m.in))
	}
	dt := linearType(s.b.f32, in.dt, m)
	return s.record(in.rows, m.out, dt, func(a *Arena) *Array { return linear(a, in.x, m, s.b.f32) })
}

// linearType is the type of x·Wᵀ + bias: float32 in float32 mode; else
// the activations' type for quantized weights (quantized_matmul computes
// in x's type) and the promotion of both for dense ones, promoted with
// the bias's type.
func linearType(f32mode bool, x tensor.DType, m *weight) tensor.DType {
	if f32mode {
		return tensor.F32
	}
	dt := x
	if !m.affine && m.fp == "" {
		dt = promote(x, m.dt)
	}
	if m.bias != nil {
		dt = promote(dt, m.bias.DType())
	}
	return dt
}

// linear is x·Wᵀ + bias: in float32 mode the product is widened before the
// bias is added; else as mlx.nn.Linear (addmm with a bias) and
// QuantizedLinear (the quantized product, then the bias) compute it.
func linear(a *Arena, x *Array, m *weight, f32mode bool) *Array {
	product := func() *Array {
		switch {
		case m.affine:
			return a.QuantizedMatmul(x, m.w, m.scales, m.biases, true, m.group, m.bits)
		case m.fp != "":
			return a.QuantizedMatmulMode(x, m.w, m.scales, nil, true, m.group, m.bits, m.fp)
		default:
			return a.Matmul(x, a.Transpose(m.w, 1, 0))
		}
	}
	if f32mode {
		y := f32(a, product())
		if m.bias != nil {
			y = a.Add(y, m.bias)
		}
		return y
	}
	if m.bias != nil && !m.affine && m.fp == "" {
		return a.Addmm(m.bias, x, a.Transpose(m.w, 1, 0))
	}
	y := product()
	if m.bias != nil {
		y = a.Add(y, m.bias)
	}
	return y
}

// RMSNorm normalizes each group of w.Len() features of every row.
func (s *step) RMSNorm(x backend.Array, w backend.Vector, eps float32) backend.Array {
	v, ok := w.(*vector)
	if !ok {
		panic(fmt.Sprintf("mlx: vector of another backend (%T)", w))
	}
	in := use(nd(x), v.dt)
	if in.cols%v.n != 0 {
		panic(fmt.Sprintf("mlx: RMSNorm: %d features are not groups of %d", in.cols, v.n))
	}
	return s.record(in.rows, in.cols, promote(in.dt, v.dt), func(a *Arena) *Array {
		y := a.RMSNorm(a.Reshape(in.x, in.rows, in.cols/v.n, v.n), v.v, eps)
		return a.Reshape(y, in.rows, in.cols)
	})
}

// LayerNorm normalizes every row, then scales by w and adds bias.
func (s *step) LayerNorm(x backend.Array, w, bias backend.Vector, eps float32) backend.Array {
	wv, ok1 := w.(*vector)
	bv, ok2 := bias.(*vector)
	if !ok1 || !ok2 {
		panic(fmt.Sprintf("mlx: LayerNorm: vectors of another backend (%T, %T)", w, bias))
	}
	in := use(nd(x), wv.dt)
	if wv.n != in.cols || bv.n != in.cols {
		panic(fmt.Sprintf("mlx: LayerNorm: %d features, weight %d, bias %d", in.cols, wv.n, bv.n))
	}
	dt := promote(promote(in.dt, wv.dt), bv.dt)
	return s.record(in.rows, in.cols, dt, func(a *Arena) *Array { return a.LayerNorm(in.x, wv.v, bv.v, eps) })
}

// GELU returns x·(1 + erf(x/√2))/2, in x's type.
func (s *step) GELU(x backend.Array) backend.Array {
	in := use(nd(x), tensor.F32)
	return s.record(in.rows, in.cols, in.dt, func(a *Arena) *Array {
		c := func(v float32) *Array { return as(a, a.FromFloat32([]float32{v}, 1), in.dt) }
		half, invSqrt2, one := c(0.5), c(float32(1/math.Sqrt2)), c(1)
		cdf := a.Multiply(a.Add(a.Erf(a.Multiply(in.x, invSqrt2)), one), half)
		return a.Multiply(in.x, cdf)
	})
}

// EncoderAttention runs MLX's scaled dot-product attention without a mask
// per sequence of lens rows: every query sees its own sequence's keys.
func (s *step) EncoderAttention(q, k, v backend.Array, heads int, scale float32, lens []int) backend.Array {
	qa, ka, va := use(nd(q), tensor.F32), use(nd(k), tensor.F32), use(nd(v), tensor.F32)
	hd, err := backend.EncoderShape(qa, ka, va, heads, lens)
	if err != nil {
		panic("mlx: " + err.Error())
	}
	seqs := append([]int(nil), lens...)
	return s.record(qa.rows, qa.cols, promote(promote(qa.dt, ka.dt), va.dt), func(a *Arena) *Array {
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
	in := use(nd(x), tensor.F32)
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
	return s.record(in.rows, in.cols, in.dt, func(a *Arena) *Array {
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
			// In x's type: mlx-lm multiplies by a Python scalar, which
			// takes the array's type.
			inScale = as(a, a.FromFloat32(v, hd), in.dt)
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
	return s.attention(layer, q, k, v, scale, 0, nil, b)
}

// attention is Attention, over the last window positions of each query
// if window > 0 (see windowAttend).
func (s *step) attention(layer int, q, k, v backend.Array, scale float32, window int, sinks *vector, b *backend.Batch) backend.Array {
	qa := use(nd(q), tensor.F32)
	// Without k and v the cache already holds the rows (backend.Step's
	// Attention: KV shared with an earlier layer of the step).
	shared := k == nil && v == nil
	ka, va := qa, qa
	if !shared {
		ka, va = use(nd(k), tensor.F32), use(nd(v), tensor.F32)
	}
	dt := promote(promote(qa.dt, ka.dt), va.dt)
	if b.Rows() != qa.rows || ka.rows != qa.rows || va.rows != qa.rows {
		panic(fmt.Sprintf("mlx: Attention: q, k, v have %d, %d, %d rows, batch %d", qa.rows, ka.rows, va.rows, b.Rows()))
	}
	if len(b.Seqs) == 0 {
		return s.record(0, qa.cols, qa.dt, func(a *Arena) *Array { return a.Zeros(qa.dt, 0, qa.cols) })
	}
	spec := b.Seqs[0].Cache.Spec()
	hd, kvh := spec.Dim(spec.Index(layer)), spec.KVHeads
	if shared {
		ka, va = &node{rows: qa.rows, cols: kvh * hd, dt: qa.dt}, &node{rows: qa.rows, cols: kvh * hd, dt: qa.dt}
	}
	if ka.cols != kvh*hd || va.cols != kvh*hd || qa.cols%(kvh*hd) != 0 {
		panic(fmt.Sprintf("mlx: Attention: q, k, v have %d, %d, %d features for %d KV heads of %d", qa.cols, ka.cols, va.cols, kvh, hd))
	}
	if sinks != nil && sinks.n != qa.cols/hd {
		panic(fmt.Sprintf("mlx: SinkAttention: %d sinks for %d heads", sinks.n, qa.cols/hd))
	}
	caches := make([]*KVCache, len(b.Seqs))
	seqs := append([]backend.Seq(nil), b.Seqs...)
	for i, sq := range seqs {
		c, ok := sq.Cache.(*KVCache)
		if !ok {
			panic(fmt.Sprintf("mlx: KV cache of another backend (%T)", sq.Cache))
		}
		if cs := c.Spec(); !cs.SameShape(spec) {
			panic("mlx: Attention: sequences with different KV cache shapes")
		}
		if shared {
			if c.Len(layer) < sq.Offset+sq.Len {
				panic(fmt.Sprintf("mlx: Attention without k and v: layer %d holds %d positions, not %d", layer, c.Len(layer), sq.Offset+sq.Len))
			}
		} else {
			c.reserve(layer, sq.Offset, sq.Len, promote(ka.dt, va.dt))
		}
		caches[i] = c
	}
	return s.record(qa.rows, qa.cols, dt, func(a *Arena) *Array {
		parts := make([]*Array, 0, len(seqs))
		var sk *Array
		if sinks != nil {
			sk = as(a, sinks.v, dt)
		}
		row := 0
		for i, sq := range seqs {
			var keys, values *Array
			if shared {
				keys, values = caches[i].read(a, layer, sq.Offset+sq.Len)
			} else {
				keys, values = caches[i].write(a, layer, sq.Offset, seqHeads(a, ka.x, row, sq.Len, ka.cols, hd), seqHeads(a, va.x, row, sq.Len, va.cols, hd))
			}
			var y *Array
			if window > 0 {
				y = windowAttend(a, seqHeads(a, qa.x, row, sq.Len, qa.cols, hd), keys, values, scale, window, sq, hd, kvh, sk)
			} else {
				y = a.SDPA(seqHeads(a, qa.x, row, sq.Len, qa.cols, hd), keys, values, scale, sq.Len > 1, nil, sk)
			}
			parts = append(parts, rowsOf(a, y, sq.Len, qa.cols))
			row += sq.Len
		}
		// MLX's attention answers in the queries' type; q, k and v of
		// different types (Gemma 4's normed k beside its weightless-normed
		// v in native mode) promote, as a composed attention would.
		return as(a, a.Concatenate(parts, 0), dt)
	})
}

func sameShape(op string, x, y *node) {
	if x.rows != y.rows || x.cols != y.cols {
		panic(fmt.Sprintf("mlx: %s: shapes [%d, %d] and [%d, %d] differ", op, x.rows, x.cols, y.rows, y.cols))
	}
}

// operands returns the nodes of a binary op: an open Input meeting a
// computed array takes its type (float32 when both are open).
func operands(x, y backend.Array) (p, q *node) {
	p, q = nd(x), nd(y)
	switch {
	case p.open && !q.open:
		use(p, q.dt)
	case q.open && !p.open:
		use(q, p.dt)
	}
	return use(p, tensor.F32), use(q, tensor.F32)
}

// Add returns x + y.
func (s *step) Add(x, y backend.Array) backend.Array {
	p, q := operands(x, y)
	sameShape("Add", p, q)
	return s.record(p.rows, p.cols, promote(p.dt, q.dt), func(a *Arena) *Array { return a.Add(p.x, q.x) })
}

// SwiGLU returns silu(gate)·up = gate·sigmoid(gate)·up.
func (s *step) SwiGLU(gate, up backend.Array) backend.Array {
	g, u := use(nd(gate), tensor.F32), use(nd(up), tensor.F32)
	sameShape("SwiGLU", g, u)
	return s.record(g.rows, g.cols, promote(g.dt, u.dt), func(a *Arena) *Array {
		return a.Multiply(a.Multiply(g.x, a.Sigmoid(g.x)), u.x)
	})
}

// Rows gathers rows of x.
func (s *step) Rows(x backend.Array, rows []int) backend.Array {
	in := use(nd(x), tensor.F32)
	idx := make([]int32, len(rows))
	for i, r := range rows {
		if r < 0 || r >= in.rows {
			panic(fmt.Sprintf("mlx: Rows: row %d of %d", r, in.rows))
		}
		idx[i] = int32(r)
	}
	return s.record(len(rows), in.cols, in.dt, func(a *Arena) *Array {
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
			if x.DType() != n.dt {
				// The recorded type decides KV caches' and Inputs' types:
				// a difference is a bug of this file.
				return fmt.Errorf("mlx: an op made %v, recorded as %v", x.DType(), n.dt)
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
