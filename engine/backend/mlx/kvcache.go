//go:build cgo

package mlx

import (
	"context"
	"fmt"

	"fusion/engine/backend"
	"fusion/engine/tensor"
)

// KVStep is the number of positions a KV cache grows by (mlx-lm's
// KVCache.step).
const KVStep = 256

// KVLayout is the block layout of ReadKV and AppendKV: for each layer of
// the spec in order, the keys [n, kvHeads·headDim] then the values, of the
// n positions, float32 little-endian — the CPU backend's layout. A cache
// in native mode holds bf16 (or f16) keys and values: ReadKV widens them
// to float32 and AppendKV narrows them back, both exact (every bf16 or
// f16 value is a float32, and converts back to itself).
const KVLayout = "f32le-layer-k-v"

// KVCache holds one sequence's keys and values as MLX arrays, per layer
// [1, kvHeads, capacity, headDim] in the type of the keys the model
// writes (float32, or bf16 in native mode for a bf16 model), grown by
// KVStep positions. The positions held (lens) are kept on the Go side and
// change when an op is recorded; the arrays change on the MLX thread when
// the step runs.
type KVCache struct {
	b    *Backend
	spec backend.KVSpec
	// dt is the type of the keys and values, known from the first write
	// recorded (Invalid before: blocks imported into a fresh cache are held
	// as float32 and converted, exactly, when the model first writes).
	dt   tensor.DType
	lens []int
	held []int    // capacity per layer as recorded (Go side, for Bytes)
	caps []int    // capacity per layer of the arrays (MLX thread)
	k, v []*Array // per layer, nil until written (MLX thread)
}

var _ backend.KVCache = (*KVCache)(nil)

// NewKVCache makes an empty cache; arrays are allocated on first write.
func (b *Backend) NewKVCache(spec backend.KVSpec) (backend.KVCache, error) {
	if err := spec.Check(); err != nil {
		return nil, fmt.Errorf("mlx: %w", err)
	}
	return &KVCache{b: b, spec: spec, lens: make([]int, spec.Layers), held: make([]int, spec.Layers), caps: make([]int, spec.Layers),
		k: make([]*Array, spec.Layers), v: make([]*Array, spec.Layers)}, nil
}

// Spec is the cache's shape.
func (c *KVCache) Spec() backend.KVSpec { return c.spec }

func (c *KVCache) layer(l int) int { return c.spec.Index(l) }

// Len is the number of positions held for layer.
func (c *KVCache) Len(layer int) int { return c.lens[c.layer(layer)] }

// Truncate drops the positions from n on (the arrays keep their
// capacity, counted by Bytes).
func (c *KVCache) Truncate(n int) {
	n = max(n, 0)
	for i := range c.lens {
		c.lens[i] = min(c.lens[i], n)
	}
}

// perPos is the bytes of one position of the layer at index li (K and
// V) in memory.
func (c *KVCache) perPos(li int) int64 {
	size := 4
	if c.dt != tensor.Invalid {
		size = dtypeBytes(c.dt)
	}
	return int64(2 * c.spec.KVHeads * c.spec.Dim(li) * size)
}

// Bytes is the memory of the arrays and of the positions held.
func (c *KVCache) Bytes() (allocated, used int64) {
	for i := range c.lens {
		allocated += int64(c.held[i]) * c.perPos(i)
		used += int64(c.lens[i]) * c.perPos(i)
	}
	return allocated, used
}

// capFor is the capacity the arrays have once n positions are written.
func (c *KVCache) capFor(n int) int {
	return min((n+KVStep-1)/KVStep*KVStep, roundUp(c.spec.MaxLen))
}

func roundUp(n int) int { return (n + KVStep - 1) / KVStep * KVStep }

// Free releases the arrays.
func (c *KVCache) Free() {
	clear(c.lens)
	clear(c.held)
	_ = c.b.rt.Do(context.Background(), func() error {
		for i := range c.k {
			for _, x := range []*Array{c.k[i], c.v[i]} {
				if x != nil {
					x.Free()
				}
			}
			c.k[i], c.v[i], c.caps[i] = nil, nil, 0
		}
		return nil
	})
}

// reserve records that layer will hold offset+n positions of type dt (at
// op time, as the CPU backend's write does), checking that the write
// leaves no gap and fits.
func (c *KVCache) reserve(layer, offset, n int, dt tensor.DType) {
	if c.dt != tensor.Invalid && c.dt != dt {
		panic(fmt.Sprintf("mlx: KV cache of %v written with %v", c.dt, dt))
	}
	c.dt = dt
	li := c.layer(layer)
	if offset > c.lens[li] {
		panic(fmt.Sprintf("mlx: KV write at %d leaves a gap after %d positions (layer %d)", offset, c.lens[li], layer))
	}
	if offset+n > c.spec.MaxLen {
		panic(fmt.Sprintf("mlx: KV cache of %d positions cannot hold %d", c.spec.MaxLen, offset+n))
	}
	c.lens[li] = offset + n
	c.held[li] = max(c.held[li], c.capFor(offset+n))
}

// write stores k and v ([1, kvHeads, n, headDim]) at positions offset…
// of layer, growing the arrays, and returns the keys and values of
// positions [0, offset+n). It runs on the MLX thread; the new arrays are
// the cache's, the old ones freed (the graph keeps them as long as it
// needs them).
func (c *KVCache) write(a *Arena, layer, offset int, k, v *Array) (keys, values *Array) {
	li := c.layer(layer)
	n := k.Shape()[2]
	end := offset + n
	kvh, hd := c.spec.KVHeads, c.spec.Dim(li)
	for _, p := range []*[]*Array{&c.k, &c.v} {
		// Positions imported before the model's first write are float32
		// values of k's type: converted exactly.
		if arr := (*p)[li]; arr != nil && arr.DType() != k.DType() {
			(*p)[li] = a.Detach(a.AsType(arr, k.DType()))
			arr.Free()
		}
	}
	if need := c.capFor(end); need > c.caps[li] {
		for _, p := range []*[]*Array{&c.k, &c.v} {
			arr := (*p)[li]
			grown := a.Zeros(k.DType(), 1, kvh, need-c.caps[li], hd)
			if arr != nil {
				grown = a.Concatenate([]*Array{arr, grown}, 2)
				arr.Free()
			}
			(*p)[li] = a.Detach(grown)
		}
		c.caps[li] = need
	}
	start, stop := []int{0, 0, offset, 0}, []int{1, kvh, end, hd}
	for _, p := range []struct {
		arr **Array
		upd *Array
	}{{&c.k[li], k}, {&c.v[li], v}} {
		next := a.SliceUpdate(*p.arr, p.upd, start, stop)
		if a.Err() != nil {
			return &Array{}, &Array{}
		}
		(*p.arr).Free()
		*p.arr = a.Detach(next)
	}
	all := []int{1, kvh, end, hd}
	return a.Slice(c.k[li], []int{0, 0, 0, 0}, all), a.Slice(c.v[li], []int{0, 0, 0, 0}, all)
}

// read returns the keys and values of positions [0, end) of layer,
// written earlier in the step (an attention without k and v).
func (c *KVCache) read(a *Arena, layer, end int) (keys, values *Array) {
	li := c.layer(layer)
	all := []int{1, c.spec.KVHeads, end, c.spec.Dim(li)}
	return a.Slice(c.k[li], []int{0, 0, 0, 0}, all), a.Slice(c.v[li], []int{0, 0, 0, 0}, all)
}

// KVFormat names the block layout of ReadKV and AppendKV.
func (c *KVCache) KVFormat() string { return KVLayout }

// KVBytes is the size of a block of n positions.
func (c *KVCache) KVBytes(n int) int { return n * c.spec.PosFloats() * 4 }

// ReadKV copies positions [from, to) of every layer into a new block.
func (c *KVCache) ReadKV(from, to int) ([]byte, error) {
	if err := c.spec.CheckReadKV(c.lens, from, to); err != nil {
		return nil, fmt.Errorf("mlx: %w", err)
	}
	if to == from {
		return []byte{}, nil
	}
	kvh := c.spec.KVHeads
	out := make([]byte, 0, c.KVBytes(to-from))
	err := c.b.rt.Do(context.Background(), func() error {
		a := c.b.rt.NewArena()
		defer a.Free()
		for li := range c.spec.Layers {
			hd := c.spec.Dim(li)
			for _, arr := range []*Array{c.k[li], c.v[li]} {
				part := a.Transpose(a.Slice(arr, []int{0, 0, from, 0}, []int{1, kvh, to, hd}), 0, 2, 1, 3)
				b, err := a.Bytes(f32(a, part))
				if err != nil {
					return err
				}
				out = append(out, b...)
			}
		}
		return a.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("mlx: ReadKV: %w", err)
	}
	return out, nil
}

// AppendKV appends the positions of a ReadKV block to every layer.
func (c *KVCache) AppendKV(block []byte) error {
	n, off, err := c.spec.CheckAppendKV(c.lens, len(block), c.KVBytes(1))
	if err != nil {
		return fmt.Errorf("mlx: %w", err)
	}
	kvh := c.spec.KVHeads
	dt := c.dt
	err = c.b.rt.Do(context.Background(), func() error {
		a := c.b.rt.NewArena()
		defer a.Free()
		var written []*Array
		base := 0
		for li := range c.spec.Layers {
			hd := c.spec.Dim(li)
			half := n * kvh * hd * 4
			k := a.Transpose(a.FromBytes(tensor.F32, block[base:base+half], 1, n, kvh, hd), 0, 2, 1, 3)
			v := a.Transpose(a.FromBytes(tensor.F32, block[base+half:base+2*half], 1, n, kvh, hd), 0, 2, 1, 3)
			if dt != tensor.Invalid {
				k, v = as(a, k, dt), as(a, v, dt)
			}
			keys, values := c.write(a, c.spec.FirstLayer+li, off, k, v)
			written = append(written, keys, values)
			base += 2 * half
		}
		return a.Eval(written...)
	})
	if err != nil {
		return fmt.Errorf("mlx: AppendKV: %w", err)
	}
	for i := range c.lens {
		c.lens[i] = off + n
		c.held[i] = max(c.held[i], c.capFor(off+n))
	}
	return nil
}
