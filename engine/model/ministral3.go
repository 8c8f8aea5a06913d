package model

import (
	"fmt"

	"fusion/engine/backend"
	"fusion/engine/modelfile"
)

// Ministral 3 (mlx-lm's ministral3: Ministral-3 3B, 8B and 14B, the text
// model of a mistral3 config): Llama's block whose queries, once
// rotated, are multiplied by a factor that grows with their position p
// (Llama 4's attention temperature, modelfile.QueryScale):
//
//	q_p ← q_p · (1 + β·ln(1 + ⌊p / n⌋)),  β = llama_4_scaling_beta, n = original_max_position_embeddings
//
// MixRows with groups of one row is that product, each row times its own
// factor (on MLX in the activations' type, as mlx-lm casts the factors to
// the queries' dtype), so no backend needed a new op.
type ministral3Block struct {
	llamaBlock
	scale *modelfile.QueryScale
}

func loadMinistral3(w *loader, prefix string) block {
	return &ministral3Block{llamaBlock: *loadLlama(w, prefix).(*llamaBlock), scale: w.cfg.QueryScale}
}

// setupMinistral3 checks the query scale is there and gives the
// sliding layers, if any, their window.
func setupMinistral3(m *Model) error {
	if q := m.Config.QueryScale; q == nil || q.Every <= 0 {
		return fmt.Errorf("%w: ministral3 without its query scale", modelfile.ErrInvalidConfig)
	}
	return setupWindows(m)
}

func (b *ministral3Block) forward(f *frame, x backend.Array) backend.Array {
	h := f.Add(x, b.attention(f, f.norm(x, b.inputNorm)))
	return f.Add(h, b.mlp.forward(f, f.norm(h, b.postNorm)))
}

func (b *ministral3Block) attention(f *frame, x backend.Array) backend.Array {
	a := &b.attnProj
	q := f.MixRows(f.rotate(f.Linear(x, a.q)), 1, queryScales(b.scale, f.batch))
	k := f.rotate(f.Linear(x, a.k))
	v := f.Linear(x, a.v)
	return f.Linear(f.attend(q, k, v), a.o)
}

// queryScales is each row's factor at its position, its sequence's
// offset plus its index among the sequence's new rows: the same whatever
// else is in the batch, whichever stage runs the layer, and however the
// positions before it came into the cache (computed, or a prefix-cache
// hit).
func queryScales(s *modelfile.QueryScale, b *backend.Batch) []float32 {
	out := make([]float32, 0, b.Rows())
	for _, sq := range b.Seqs {
		for i := range sq.Len {
			out = append(out, s.At(sq.Offset+i))
		}
	}
	return out
}
