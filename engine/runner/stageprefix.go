package runner

import (
	"fmt"

	"fusion/engine/model"
	"fusion/engine/prefixcache"
)

// This file is the part of the pipeline's prefix cache every stage shares
// (the first stage in restorePipe, the later ones in the pipeline
// service): importing a prompt's cached blocks of the stage's layers into
// a new sequence, and keeping the depth all the stages agreed on.
//
// A stage whose layers hold a Gated DeltaNet state can stop only where
// its state is: the end of a block that carried a snapshot of it (see
// model.Sequence.ExportKV). The stages store their blocks at the same
// boundaries (the first stage's prefill cuts its chunks there and tells
// the others to save as each chunk lands), so the depths at which each
// can stop are the same positions; every stage lowers the limit it passes
// down to its own deepest one, and the last stage's answer is the depth
// every stage keeps.

// StageCacheable reports whether a stage of layers of m can keep blocks
// in a prefix cache: not a range of Gated DeltaNet layers alone, which
// has no KV for a block to hold its state with (model.Sequence.ExportKV
// refuses it). A pipeline with such a stage restores nothing.
func StageCacheable(m *model.Model) bool { return !m.Recurrent() || m.KVBytesPerToken() > 0 }

// StageImport is what ImportStageBlocks put into a sequence.
type StageImport struct {
	// Blocks are the data of the blocks imported, in order (the cache's:
	// never modified), kept to import again should the stages agree on a
	// shallower depth than this stage's state.
	Blocks [][]byte
	// Depth is the deepest position the sequence can be kept at: the
	// positions imported (at most the limit) for layers without recurrent
	// state, the end of the deepest block with a snapshot for layers with.
	Depth int
	// Bad, when set, is the block that did not import (removed from the
	// cache; the blocks before it are kept).
	Bad error
}

// ImportStageBlocks imports into the empty sequence seq of m the leading
// blocks of a prompt that c holds for the stage stage (chains are the
// prompt's chained block keys, block positions each), up to limit
// positions: for m with recurrent layers only the blocks that end within
// the limit. The sequence is left at the import's Depth.
func ImportStageBlocks(c *prefixcache.Cache, stage prefixcache.Key, chains []prefixcache.Key, m *model.Model, seq *model.Sequence, block, limit int) StageImport {
	var out StageImport
	rec := m.Recurrent()
	for i, chain := range chains {
		end := (i + 1) * block
		if i*block >= limit || rec && end > limit {
			break
		}
		key := StageBlockKey(stage, chain)
		data, tier := c.Get(key)
		if tier == prefixcache.Miss {
			break
		}
		err := seq.ImportKV(data)
		switch {
		case err != nil:
		case rec:
			// The last layer may be a DeltaNet one, whose length is its
			// state's: only a snapshot moves it.
			if seq.StateLen() == end {
				out.Depth = end
			}
		case seq.Len() != end:
			err = fmt.Errorf("the block held %d positions, not %d", seq.Len()-i*block, block)
		default:
			out.Depth = min(end, limit)
		}
		if err != nil {
			out.Bad = fmt.Errorf("block %d: %w", i, err)
			c.Remove(key)
			break
		}
		out.Blocks = append(out.Blocks, data)
	}
	if !KeepStagePrefix(m, seq, out.Blocks, block, out.Depth) {
		out.Depth = 0
	}
	return out
}

// KeepStagePrefix makes seq, into which blocks were imported, hold exactly
// n positions (n at most what was imported). Layers with a recurrent
// state are imported again up to n when their state is elsewhere; it
// reports false, the sequence emptied, when n is not the end of a block
// with a snapshot of that state.
func KeepStagePrefix(m *model.Model, seq *model.Sequence, blocks [][]byte, block, n int) bool {
	if !m.Recurrent() || seq.StateLen() == n {
		seq.Truncate(n)
		return true
	}
	seq.Truncate(0)
	if n%block != 0 || n/block > len(blocks) {
		return false
	}
	for _, b := range blocks[:n/block] {
		if err := seq.ImportKV(b); err != nil {
			seq.Truncate(0)
			return false
		}
	}
	if seq.StateLen() != n {
		seq.Truncate(0)
		return false
	}
	seq.Truncate(n)
	return true
}
