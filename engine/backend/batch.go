package backend

// Batch describes the rows of a step: the new tokens of several
// sequences, each sequence a contiguous span of rows, in order.
type Batch struct {
	Seqs []Seq
}

// Seq is one sequence's part of a batch.
type Seq struct {
	// Cache is the sequence's KV cache.
	Cache KVCache
	// Offset is the position of the sequence's first new token: the
	// number of positions already in its cache for the layers run.
	Offset int
	// Len is the number of new tokens (rows): a prefill chunk, or 1 when
	// decoding.
	Len int
}

// Rows is the total number of rows of the batch.
func (b *Batch) Rows() int {
	n := 0
	for _, s := range b.Seqs {
		n += s.Len
	}
	return n
}

// KVSpec is the shape of one sequence's KV cache.
type KVSpec struct {
	// FirstLayer and Layers: the cache holds layers [FirstLayer,
	// FirstLayer+Layers), the layers a model (or a pipeline stage) runs.
	FirstLayer, Layers int
	KVHeads, HeadDim   int
	// HeadDims, if not nil, is each layer's head width (one per layer of
	// the range, in order), overriding HeadDim: Gemma 4's full-attention
	// layers are wider than its sliding ones. See Dim.
	HeadDims []int
	// MaxLen is the largest number of positions the cache may hold.
	MaxLen int
}

// KVCache is the keys and values of one sequence for a range of layers.
// Attention appends to it; its memory grows in blocks as it fills.
type KVCache interface {
	Spec() KVSpec
	// Len is the number of positions held for layer (an absolute layer
	// number within the spec's range).
	Len(layer int) int
	// Truncate drops the positions from n on, in every layer.
	Truncate(n int)
	// Bytes is the memory allocated for the cache and the part of it in
	// use.
	Bytes() (allocated, used int64)
	// Free releases the cache's memory; it must not be used afterwards.
	Free()

	// KVFormat names the layout ReadKV writes and AppendKV reads (element
	// type and order, e.g. "f32-lkv"): blocks are only exchanged between
	// caches of the same format and spec.
	KVFormat() string
	// KVBytes is the size of the block ReadKV makes for n positions.
	KVBytes(n int) int
	// ReadKV copies the keys and values of positions [from, to) of every
	// layer of the cache into a new block, exactly (a restored position is
	// bit-identical to a computed one). Every layer must hold to
	// positions.
	ReadKV(from, to int) ([]byte, error)
	// AppendKV appends the positions of a ReadKV block to every layer; the
	// layers must all hold the same number of positions.
	AppendKV(block []byte) error
}
