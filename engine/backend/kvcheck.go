package backend

import "fmt"

// Check reports whether the spec describes a cache.
func (s KVSpec) Check() error {
	if s.FirstLayer < 0 || s.Layers <= 0 || s.KVHeads <= 0 || s.HeadDim <= 0 || s.MaxLen <= 0 {
		return fmt.Errorf("invalid KV cache spec %+v", s)
	}
	if s.HeadDims != nil {
		if len(s.HeadDims) != s.Layers {
			return fmt.Errorf("invalid KV cache spec %+v: %d head widths for %d layers", s, len(s.HeadDims), s.Layers)
		}
		for _, d := range s.HeadDims {
			if d <= 0 {
				return fmt.Errorf("invalid KV cache spec %+v", s)
			}
		}
	}
	return nil
}

// Dim is the head width of the layer at index i of the spec's layers
// (i = layer − FirstLayer): HeadDims[i], or HeadDim for every layer.
func (s KVSpec) Dim(i int) int {
	if s.HeadDims != nil {
		return s.HeadDims[i]
	}
	return s.HeadDim
}

// PosFloats is the number of floats one position takes over all the
// spec's layers, keys and values.
func (s KVSpec) PosFloats() int {
	n := 0
	for i := range s.Layers {
		n += 2 * s.KVHeads * s.Dim(i)
	}
	return n
}

// SameShape reports whether two specs cache layers of the same widths
// and heads (whatever their lengths): what attention over several
// sequences' caches needs.
func (s KVSpec) SameShape(o KVSpec) bool {
	if s.KVHeads != o.KVHeads || s.Layers != o.Layers || s.FirstLayer != o.FirstLayer {
		return false
	}
	for i := range s.Layers {
		if s.Dim(i) != o.Dim(i) {
			return false
		}
	}
	return true
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
