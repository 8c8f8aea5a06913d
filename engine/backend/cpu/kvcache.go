package cpu

import (
	"fmt"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu/kernels"
)

// BlockSize is the number of positions of one KV cache block.
const BlockSize = 256

// KVCache holds one sequence's keys and values in float32, in blocks of
// BlockSize positions allocated as the sequence grows. A block holds, for
// every layer of the spec and every KV head, the keys as a [BlockSize,
// headDim] matrix and the values transposed, [headDim, BlockSize], so that
// both attention products are matrix products over a block: scores =
// q·Kᵀ and out = p·V = p·(Vᵀ)ᵀ.
type KVCache struct {
	spec   backend.KVSpec
	lens   []int // positions held per layer (index: layer − FirstLayer)
	blocks []*kvBlock
	// base is where each layer's matrices start in a block (floats; a
	// layer's width is spec.Dim), and the block's size last.
	base []int
}

type kvBlock struct {
	data []float32
	k    []*kernels.Dense // per (layer, head): keys [BlockSize, headDim]
	vt   []*kernels.Dense // per (layer, head): values [headDim, BlockSize]
}

var _ backend.KVCache = (*KVCache)(nil)

// NewKVCache makes an empty cache; blocks are allocated on first write.
func (b *Backend) NewKVCache(spec backend.KVSpec) (backend.KVCache, error) {
	if err := spec.Check(); err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	base := make([]int, spec.Layers+1)
	for i := range spec.Layers {
		base[i+1] = base[i] + spec.KVHeads*2*BlockSize*spec.Dim(i)
	}
	return &KVCache{spec: spec, lens: make([]int, spec.Layers), base: base}, nil
}

// Spec is the cache's shape.
func (c *KVCache) Spec() backend.KVSpec { return c.spec }

func (c *KVCache) layer(l int) int { return c.spec.Index(l) }

// Len is the number of positions held for layer.
func (c *KVCache) Len(layer int) int { return c.lens[c.layer(layer)] }

// Truncate drops positions from n on and the blocks no layer needs.
func (c *KVCache) Truncate(n int) {
	n = max(n, 0)
	for i := range c.lens {
		c.lens[i] = min(c.lens[i], n)
	}
	keep := (n + BlockSize - 1) / BlockSize
	if keep < len(c.blocks) {
		clear(c.blocks[keep:])
		c.blocks = c.blocks[:keep]
	}
}

// blockFloats is the size of one block.
func (c *KVCache) blockFloats() int { return c.base[c.spec.Layers] }

// dim is the head width of the layer at index li.
func (c *KVCache) dim(li int) int { return c.spec.Dim(li) }

// Bytes is the memory of the allocated blocks, and of the positions held
// (per layer, summed over layers).
func (c *KVCache) Bytes() (allocated, used int64) {
	s := c.spec
	for li, n := range c.lens {
		used += int64(n) * int64(s.KVHeads*2*c.dim(li)*4)
	}
	return int64(len(c.blocks)) * int64(c.blockFloats()) * 4, used
}

// Free drops every block.
func (c *KVCache) Free() {
	c.blocks = nil
	clear(c.lens)
}

// grow allocates blocks until the cache can hold n positions.
func (c *KVCache) grow(n int) {
	s := c.spec
	if n > s.MaxLen {
		panic(fmt.Sprintf("cpu: KV cache of %d positions cannot hold %d", s.MaxLen, n))
	}
	for len(c.blocks)*BlockSize < n {
		blk := &kvBlock{data: make([]float32, c.blockFloats())}
		for li := range s.Layers {
			hd := c.dim(li)
			for h := range s.KVHeads {
				kd, vtd := blk.matrices(c.base[li], h, hd)
				k, err1 := kernels.NewF32(BlockSize, hd, kd)
				vt, err2 := kernels.NewF32(hd, BlockSize, vtd)
				if err1 != nil || err2 != nil {
					panic(fmt.Sprintf("cpu: KV block: %v %v", err1, err2))
				}
				blk.k = append(blk.k, k)
				blk.vt = append(blk.vt, vt)
			}
		}
		c.blocks = append(c.blocks, blk)
	}
}

// matrices returns the keys [BlockSize·headDim] and transposed values
// [headDim·BlockSize] of block blk, layer index li, head h, as floats.
func (c *KVCache) matrices(blk, li, h int) (k, vt []float32) {
	return c.blocks[blk].matrices(c.base[li], h, c.dim(li))
}

// matrices are head h's keys and transposed values of the layer whose
// matrices start at base, of head width hd.
func (b *kvBlock) matrices(base, h, hd int) (k, vt []float32) {
	mat := BlockSize * hd
	d := b.data[base+2*h*mat:]
	return d[:mat], d[mat : 2*mat]
}

// write stores rows of k and v ([n, kvHeads·headDim]) at positions
// offset … offset+n−1 of layer, which then holds offset+n positions.
func (c *KVCache) write(layer, offset int, k, v []float32, n int) {
	li := c.layer(layer)
	if offset > c.lens[li] {
		panic(fmt.Sprintf("cpu: KV write at %d leaves a gap after %d positions (layer %d)", offset, c.lens[li], layer))
	}
	s := c.spec
	c.grow(offset + n)
	hd := c.dim(li)
	width := s.KVHeads * hd
	for t := range n {
		p := offset + t
		blk, slot := p/BlockSize, p%BlockSize
		for h := range s.KVHeads {
			kb, vtb := c.matrices(blk, li, h)
			src := k[t*width+h*hd : t*width+(h+1)*hd]
			copy(kb[slot*hd:(slot+1)*hd], src)
			vs := v[t*width+h*hd : t*width+(h+1)*hd]
			for d, x := range vs {
				vtb[d*BlockSize+slot] = x
			}
		}
	}
	c.lens[li] = offset + n
}

// KVLayout is the block layout of ReadKV and AppendKV: for each layer of
// the spec in order, the keys [n, kvHeads·headDim] then the values [n,
// kvHeads·headDim] of the n positions (headDim the layer's width), float32 little-endian (the rows
// Attention appends, as they were appended).
const KVLayout = "f32le-layer-k-v"

// KVFormat names the block layout of ReadKV and AppendKV.
func (c *KVCache) KVFormat() string { return KVLayout }

// KVBytes is the size of a block of n positions.
func (c *KVCache) KVBytes(n int) int { return n * c.spec.PosFloats() * 4 }

// ReadKV copies positions [from, to) of every layer into a new block.
func (c *KVCache) ReadKV(from, to int) ([]byte, error) {
	if err := c.spec.CheckReadKV(c.lens, from, to); err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	s := c.spec
	n := to - from
	out := make([]float32, c.KVBytes(n)/4)
	rest := out
	for li := range s.Layers {
		hd := c.dim(li)
		width := s.KVHeads * hd
		k, v := rest[:n*width], rest[n*width:2*n*width]
		rest = rest[2*n*width:]
		for t := range n {
			p := from + t
			blk, slot := p/BlockSize, p%BlockSize
			for h := range s.KVHeads {
				kb, vtb := c.matrices(blk, li, h)
				copy(k[t*width+h*hd:t*width+(h+1)*hd], kb[slot*hd:(slot+1)*hd])
				vs := v[t*width+h*hd : t*width+(h+1)*hd]
				for d := range vs {
					vs[d] = vtb[d*BlockSize+slot]
				}
			}
		}
	}
	return floatsToBytes(out), nil
}

// AppendKV appends the positions of a ReadKV block to every layer.
func (c *KVCache) AppendKV(block []byte) error {
	s := c.spec
	n, off, err := s.CheckAppendKV(c.lens, len(block), c.KVBytes(1))
	if err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	f := bytesToFloats(block)
	for li := range s.Layers {
		width := s.KVHeads * c.dim(li)
		k, v := f[:n*width], f[n*width:2*n*width]
		f = f[2*n*width:]
		c.write(s.FirstLayer+li, off, k, v, n)
	}
	return nil
}
