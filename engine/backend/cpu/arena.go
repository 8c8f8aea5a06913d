package cpu

import "unsafe"

// arena is a bump allocator of float32 buffers over a list of chunks.
// Positions are (chunk, offset) pairs; a later chunk is never smaller
// than what the allocation that opened it needed, and chunks too small for
// a request are skipped.
type arena struct {
	chunks [][]float32
	chunk  int // current chunk
	off    int // next free offset in it
	marks  []pos
}

type pos struct{ chunk, off int }

// minChunk is the smallest chunk allocated (1 Mi floats, 4 MiB).
const minChunk = 1 << 20

// alloc returns n floats of uninitialized (reused) memory.
func (a *arena) alloc(n int) []float32 {
	for a.chunk < len(a.chunks) {
		c := a.chunks[a.chunk]
		if a.off+n <= len(c) {
			s := c[a.off : a.off+n : a.off+n]
			a.off += n
			return s
		}
		a.chunk++
		a.off = 0
	}
	size := minChunk
	for _, c := range a.chunks {
		size = max(size, len(c))
	}
	size = max(size, n)
	a.chunks = append(a.chunks, make([]float32, size))
	a.chunk, a.off = len(a.chunks)-1, n
	return a.chunks[a.chunk][:n:n]
}

// mark records the current position; its index is the backend.Mark.
func (a *arena) mark() int {
	a.marks = append(a.marks, pos{a.chunk, a.off})
	return len(a.marks) - 1
}

// resetTo moves back to mark m and forgets it and later marks.
func (a *arena) resetTo(m int) {
	p := a.marks[m]
	a.chunk, a.off = p.chunk, p.off
	a.marks = a.marks[:m]
}

// after reports whether buffer s was allocated at or after mark m.
func (a *arena) after(m int, s []float32) bool {
	if len(s) == 0 {
		return false
	}
	p := a.marks[m]
	for i := p.chunk; i < len(a.chunks); i++ {
		c := a.chunks[i]
		lo := 0
		if i == p.chunk {
			lo = p.off
		}
		if lo < len(c) && inside(c[lo:], s) {
			return true
		}
	}
	return false
}

// inside reports whether s's first element lies within c.
func inside(c, s []float32) bool {
	if len(c) == 0 {
		return false
	}
	first := &c[0]
	last := &c[len(c)-1]
	e := &s[0]
	return uintptrOf(e) >= uintptrOf(first) && uintptrOf(e) <= uintptrOf(last)
}

func uintptrOf(p *float32) uintptr { return uintptr(unsafe.Pointer(p)) }
