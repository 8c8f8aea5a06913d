package backend

import "fmt"

// Check reports whether the spec describes a cache.
func (s KVSpec) Check() error {
	if s.FirstLayer < 0 || s.Layers <= 0 || s.KVHeads <= 0 || s.HeadDim <= 0 || s.MaxLen <= 0 {
		return fmt.Errorf("invalid KV cache spec %+v", s)
	}
	return nil
}

// Index is the position of layer (an absolute layer number) among the
// spec's layers. A layer outside them is a bug in the caller: it panics.
func (s KVSpec) Index(layer int) int {
	i := layer - s.FirstLayer
	if i < 0 || i >= s.Layers {
		panic(fmt.Sprintf("layer %d outside the cache's layers [%d, %d)", layer, s.FirstLayer, s.FirstLayer+s.Layers))
	}
	return i
}

// CheckReadKV checks a ReadKV of positions [from, to) against the
// positions each layer holds (lens, in the spec's layer order).
func (s KVSpec) CheckReadKV(lens []int, from, to int) error {
	if from < 0 || to < from {
		return fmt.Errorf("ReadKV [%d, %d): invalid range", from, to)
	}
	for i, n := range lens {
		if n < to {
			return fmt.Errorf("ReadKV [%d, %d): layer %d holds %d positions", from, to, s.FirstLayer+i, n)
		}
	}
	return nil
}

// CheckAppendKV checks an AppendKV of a block of size bytes, perPos bytes
// a position, against lens, and returns the number of positions it holds
// and the position they start at.
func (s KVSpec) CheckAppendKV(lens []int, size, perPos int) (n, offset int, err error) {
	if size == 0 || size%perPos != 0 {
		return 0, 0, fmt.Errorf("AppendKV: a block of %d bytes is not a whole number of positions of %d bytes", size, perPos)
	}
	n, offset = size/perPos, lens[0]
	for i, l := range lens {
		if l != offset {
			return 0, 0, fmt.Errorf("AppendKV: layer %d holds %d positions, layer %d %d", s.FirstLayer, offset, s.FirstLayer+i, l)
		}
	}
	if offset+n > s.MaxLen {
		return 0, 0, fmt.Errorf("AppendKV: %d + %d positions exceed the cache's %d", offset, n, s.MaxLen)
	}
	return n, offset, nil
}
