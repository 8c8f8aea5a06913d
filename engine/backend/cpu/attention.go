package cpu

import (
	"fmt"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu/kernels"
)

// queryChunk is the number of query rows of one attention task.
const queryChunk = 16

// attnTask is the attention of query rows [r0, r1) of one sequence for
// the query heads sharing KV head g.
type attnTask struct {
	seq    int
	base   int // the sequence's first row in the batch
	g      int
	r0, r1 int
}

// Attention stores k and v in the caches, then computes causal attention
// for every sequence, query head group and chunk of query rows in
// parallel.
func (s *step) Attention(layer int, q, k, v backend.Array, scale float32, b *backend.Batch) backend.Array {
	return s.attention(layer, q, k, v, scale, 0, nil, b)
}

// WindowAttention is Attention where each query sees the last window
// positions only.
func (s *step) WindowAttention(layer int, q, k, v backend.Array, scale float32, window int, b *backend.Batch) backend.Array {
	if window <= 0 {
		panic(fmt.Sprintf("cpu: WindowAttention: window %d", window))
	}
	return s.attention(layer, q, k, v, scale, window, nil, b)
}

// attention is causal attention, over the last window positions of each
// query if window > 0, with a sink logit per query head if sinks is not
// nil.
func (s *step) attention(layer int, q, k, v backend.Array, scale float32, window int, sinks []float32, b *backend.Batch) backend.Array {
	qa := arr(q)
	// Without k and v the cache already holds the rows (backend.Step's
	// Attention: KV shared with an earlier layer).
	shared := k == nil && v == nil
	ka, va := qa, qa
	if !shared {
		ka, va = arr(k), arr(v)
	}
	if b.Rows() != qa.rows || ka.rows != qa.rows || va.rows != qa.rows {
		panic(fmt.Sprintf("cpu: Attention: q, k, v have %d, %d, %d rows, batch %d", qa.rows, ka.rows, va.rows, b.Rows()))
	}
	if len(b.Seqs) == 0 {
		return s.new(0, qa.cols)
	}
	spec := b.Seqs[0].Cache.Spec()
	hd, kvh := spec.Dim(spec.Index(layer)), spec.KVHeads
	if shared {
		ka, va = &array{rows: qa.rows, cols: kvh * hd}, &array{rows: qa.rows, cols: kvh * hd}
	}
	if ka.cols != kvh*hd || va.cols != kvh*hd || qa.cols%(kvh*hd) != 0 {
		panic(fmt.Sprintf("cpu: Attention: q, k, v have %d, %d, %d features for %d KV heads of %d", qa.cols, ka.cols, va.cols, kvh, hd))
	}
	rep := qa.cols / (kvh * hd)
	if sinks != nil && len(sinks) != rep*kvh {
		panic(fmt.Sprintf("cpu: SinkAttention: %d sinks for %d heads", len(sinks), rep*kvh))
	}

	var tasks []attnTask
	caches := make([]*KVCache, len(b.Seqs))
	row := 0
	for i, sq := range b.Seqs {
		c, ok := sq.Cache.(*KVCache)
		if !ok {
			panic(fmt.Sprintf("cpu: KV cache of another backend (%T)", sq.Cache))
		}
		if cs := c.Spec(); !cs.SameShape(spec) {
			panic("cpu: Attention: sequences with different KV cache shapes")
		}
		caches[i] = c
		if !shared {
			c.write(layer, sq.Offset, ka.data[row*ka.cols:], va.data[row*va.cols:], sq.Len)
		} else if c.Len(layer) < sq.Offset+sq.Len {
			panic(fmt.Sprintf("cpu: Attention without k and v: layer %d holds %d positions, not %d", layer, c.Len(layer), sq.Offset+sq.Len))
		}
		for g := range kvh {
			for r0 := 0; r0 < sq.Len; r0 += queryChunk {
				tasks = append(tasks, attnTask{seq: i, base: row, g: g, r0: r0, r1: min(r0+queryChunk, sq.Len)})
			}
		}
		row += sq.Len
	}
	out := s.new(qa.rows, qa.cols)
	s.b.parallel(len(tasks), func(w, i int) {
		t := tasks[i]
		s.attend(&s.scratch[w], t, qa, out, caches[t.seq], layer, b.Seqs[t.seq].Offset, rep, scale, window, sinks)
	})
	return out
}

// attend computes one task: with m = (r1−r0)·rep query vectors Q (scaled
// by scale, as mlx does before the product) and the keys of the cache
// block by block, P = softmax(Q·Kᵀ) over the visible keys of each query,
// then out = P·V. Scores are kept block-major, [blocks][m][BlockSize], so
// each block's products read and write contiguous memory; the softmax of
// a query runs over exactly its visible keys, and probabilities past them
// are zero. With window > 0, a query at position p sees the positions
// from p−window+1: blocks before the task's first visible key are not
// read at all, and the softmax runs over the window. With sinks, each
// head's softmax also counts its sink logit (sinkSoftmax).
func (s *step) attend(sc *scratch, t attnTask, q, out *array, c *KVCache, layer, offset, rep int, scale float32, window int, sinks []float32) {
	k := s.b.k
	li := c.layer(layer)
	hd := c.dim(li)
	n := t.r1 - t.r0
	m := n * rep
	visibleMax := offset + t.r1
	nb := (visibleMax + BlockSize - 1) / BlockSize
	first := 0 // the first block any query of the task sees
	if window > 0 {
		first = max(0, offset+t.r0+1-window) / BlockSize
	}
	// part holds a block's partial products: m·headDim (values) or
	// m·BlockSize (scores) floats.
	pn := m * max(hd, BlockSize)
	buf := sc.floats(m*hd + nb*m*BlockSize + nb*BlockSize + m*hd + pn)
	qs, buf := buf[:m*hd], buf[m*hd:]
	p, buf := buf[:nb*m*BlockSize], buf[nb*m*BlockSize:]
	row, buf := buf[:nb*BlockSize], buf[nb*BlockSize:]
	acc, part := buf[:m*hd], buf[m*hd:m*hd+pn]

	for i := range n {
		src := q.row(t.base + t.r0 + i)
		for j := range rep {
			h := t.g*rep + j
			k.Scale(qs[(i*rep+j)*hd:(i*rep+j+1)*hd], src[h*hd:(h+1)*hd], scale)
		}
	}
	for blk := first; blk < nb; blk++ {
		pb := p[blk*m*BlockSize : (blk+1)*m*BlockSize]
		if valid := visibleMax - blk*BlockSize; valid < BlockSize {
			// The last block: only its filled rows, then spread to the
			// block's row stride.
			kd, _ := c.matrices(blk, li, t.g)
			kb, err := kernels.NewF32(valid, hd, kd[:valid*hd])
			if err != nil {
				panic(err)
			}
			part := part[:m*valid]
			k.MatMul(part, qs, m, kb)
			for r := range m {
				copy(pb[r*BlockSize:r*BlockSize+valid], part[r*valid:(r+1)*valid])
			}
			continue
		}
		k.MatMul(pb, qs, m, c.blocks[blk].k[li*c.spec.KVHeads+t.g])
	}
	for i := range n {
		visible := offset + t.r0 + i + 1
		lo := 0
		if window > 0 {
			lo = max(0, visible-window)
		}
		for j := range rep {
			qi := i*rep + j
			for blk := first; blk < nb; blk++ {
				copy(row[blk*BlockSize:(blk+1)*BlockSize], p[(blk*m+qi)*BlockSize:(blk*m+qi+1)*BlockSize])
			}
			if sinks != nil {
				sinkSoftmax(row[lo:visible], sinks[t.g*rep+j])
			} else {
				k.Softmax(row[lo:visible])
			}
			clear(row[first*BlockSize : lo])
			clear(row[visible:])
			for blk := first; blk < nb; blk++ {
				copy(p[(blk*m+qi)*BlockSize:(blk*m+qi+1)*BlockSize], row[blk*BlockSize:(blk+1)*BlockSize])
			}
		}
	}
	for blk := first; blk < nb; blk++ {
		vt := c.blocks[blk].vt[li*c.spec.KVHeads+t.g]
		pb := p[blk*m*BlockSize : (blk+1)*m*BlockSize]
		if blk == first {
			k.MatMul(acc, pb, m, vt)
			continue
		}
		k.MatMul(part[:m*hd], pb, m, vt)
		k.Add(acc, acc, part[:m*hd])
	}
	for i := range n {
		dst := out.row(t.base + t.r0 + i)
		for j := range rep {
			h := t.g*rep + j
			copy(dst[h*hd:(h+1)*hd], acc[(i*rep+j)*hd:(i*rep+j+1)*hd])
		}
	}
}
