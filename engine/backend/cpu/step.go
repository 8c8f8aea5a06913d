package cpu

import (
	"context"
	"fmt"

	"fusion/engine/backend"
)

// array is a row-major float32 matrix in a step's arena.
type array struct {
	rows, cols int
	data       []float32
}

func (a *array) Rows() int { return a.rows }
func (a *array) Cols() int { return a.cols }

func (a *array) row(i int) []float32 { return a.data[i*a.cols : (i+1)*a.cols] }

// step is one eager forward pass.
type step struct {
	ctx     context.Context
	b       *Backend
	arena   arena
	err     error
	scratch []scratch // per worker
	ropes   map[ropeKey][]float32
	closed  bool
}

var _ backend.Step = (*step)(nil)

func newStep(ctx context.Context, b *Backend) *step {
	return &step{
		ctx:     ctx,
		b:       b,
		arena:   arena{chunks: b.takeChunks()},
		scratch: make([]scratch, b.threads),
	}
}

// scratch is a worker's temporary memory, reused across ops of a step.
type scratch struct{ f []float32 }

func (s *scratch) floats(n int) []float32 {
	if cap(s.f) < n {
		s.f = make([]float32, n)
	}
	return s.f[:n]
}

func (s *step) new(rows, cols int) *array {
	return &array{rows: rows, cols: cols, data: s.arena.alloc(rows * cols)}
}

// arr unwraps an array of this backend.
func arr(x backend.Array) *array {
	a, ok := x.(*array)
	if !ok {
		panic(fmt.Sprintf("cpu: array of another backend (%T)", x))
	}
	return a
}

func sameShape(op string, a, b *array) {
	if a.rows != b.rows || a.cols != b.cols {
		panic(fmt.Sprintf("cpu: %s: shapes [%d, %d] and [%d, %d] differ", op, a.rows, a.cols, b.rows, b.cols))
	}
}

// Input copies data into a new [rows, cols] array.
func (s *step) Input(rows, cols int, data []float32) backend.Array {
	if rows < 0 || cols < 0 || len(data) != rows*cols {
		panic(fmt.Sprintf("cpu: Input: %d values for [%d, %d]", len(data), rows, cols))
	}
	out := s.new(rows, cols)
	copy(out.data, data)
	return out
}

// Add returns a + b.
func (s *step) Add(x, y backend.Array) backend.Array {
	a, b := arr(x), arr(y)
	sameShape("Add", a, b)
	out := s.new(a.rows, a.cols)
	s.b.parallelRows(a.rows, elementwiseRows(a.cols), func(lo, hi int) {
		s.b.k.Add(out.data[lo*a.cols:hi*a.cols], a.data[lo*a.cols:hi*a.cols], b.data[lo*a.cols:hi*a.cols])
	})
	return out
}

// SwiGLU returns silu(gate)·up.
func (s *step) SwiGLU(gate, up backend.Array) backend.Array {
	g, u := arr(gate), arr(up)
	sameShape("SwiGLU", g, u)
	out := s.new(g.rows, g.cols)
	s.b.parallelRows(g.rows, elementwiseRows(g.cols), func(lo, hi int) {
		s.b.k.SwiGLU(out.data[lo*g.cols:hi*g.cols], g.data[lo*g.cols:hi*g.cols], u.data[lo*g.cols:hi*g.cols])
	})
	return out
}

// elementwiseRows is the fewest rows worth a goroutine for an elementwise
// op on rows of cols values (about 64 Ki values).
func elementwiseRows(cols int) int { return max(1, (64<<10)/max(cols, 1)) }

// Rows gathers rows of x.
func (s *step) Rows(x backend.Array, rows []int) backend.Array {
	a := arr(x)
	out := s.new(len(rows), a.cols)
	for i, r := range rows {
		if r < 0 || r >= a.rows {
			panic(fmt.Sprintf("cpu: Rows: row %d of %d", r, a.rows))
		}
		copy(out.row(i), a.row(r))
	}
	return out
}

// Mark records the arena position.
func (s *step) Mark() backend.Mark { return backend.Mark(s.arena.mark()) }

// Release frees the arrays made since m, moving keep down to m if it is
// one of them.
func (s *step) Release(m backend.Mark, keep backend.Array) backend.Array {
	a := arr(keep)
	if !s.arena.after(int(m), a.data) {
		s.arena.resetTo(int(m))
		return a
	}
	s.arena.resetTo(int(m))
	out := s.new(a.rows, a.cols)
	copy(out.data, a.data) // memmove: out starts at or before a
	return out
}

// Eval is a no-op: every op has already run. It reports the context's
// error, so long passes can stop between layers.
func (s *step) Eval(...backend.Array) error {
	if s.err != nil {
		return s.err
	}
	return s.ctx.Err()
}

// Read copies x's values out.
func (s *step) Read(x backend.Array) ([]float32, error) {
	if err := s.Eval(); err != nil {
		return nil, err
	}
	return append([]float32(nil), arr(x).data...), nil
}

// Err is the step's first failure.
func (s *step) Err() error { return s.err }

// Close hands the arena back to the backend for the next step.
func (s *step) Close() {
	if s.closed {
		return
	}
	s.closed = true
	s.b.putChunks(s.arena.chunks)
	s.arena = arena{}
	s.ropes = nil
}
