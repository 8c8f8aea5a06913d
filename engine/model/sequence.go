package model

import (
	"fmt"

	"fusion/engine/backend"
)

// Sequence is one token sequence's state in a model: its KV cache for the
// model's loaded layers. Use it from one goroutine at a time.
type Sequence struct {
	m     *Model
	cache backend.KVCache
	// rec is the state of each recurrent layer (nil entries for the
	// others; nil for models without them), indexed by layer −
	// Layers.Start. stale is set by a Truncate it cannot follow.
	rec   []*recState
	stale bool
}

// NewSequence makes an empty sequence that may grow to maxLen positions
// (the config's max_position_embeddings when maxLen ≤ 0).
func (m *Model) NewSequence(maxLen int) (*Sequence, error) {
	if maxLen <= 0 {
		maxLen = m.Config.MaxPositionEmbeddings
	}
	c, err := m.be.NewKVCache(m.kvSpec(maxLen))
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	return &Sequence{m: m, cache: c, rec: m.newRecStates()}, nil
}

// Len is the number of positions the sequence holds in the model's last
// loaded layer: the tokens fully processed by this model.
func (s *Sequence) Len() int { return s.layerLen(s.m.Layers.End - 1) }

// MaxLen is the most positions the sequence may hold.
func (s *Sequence) MaxLen() int { return s.cache.Spec().MaxLen }

// Truncate forgets positions from n on (to rewind or retry). A recurrent
// layer's state can only go back to 0: truncating it to another earlier
// position makes the sequence refuse further steps (ErrNoRewind) until it
// is truncated to 0.
func (s *Sequence) Truncate(n int) {
	s.cache.Truncate(n)
	s.truncateRec(n)
}

// CacheBytes is the KV cache memory allocated and in use, plus the
// recurrent layers' state (fixed in size, allocated with the sequence).
func (s *Sequence) CacheBytes() (allocated, used int64) {
	allocated, used = s.cache.Bytes()
	if s.rec != nil {
		r := s.m.RecurrentBytes()
		allocated, used = allocated+r, used+r
	}
	return allocated, used
}

// Close frees the KV cache.
func (s *Sequence) Close() { s.cache.Free() }

// KVFormat names the layout of ExportKV blocks (see backend.KVCache).
func (s *Sequence) KVFormat() string { return s.cache.KVFormat() }

// ExportKV copies the keys and values of positions [from, to) of the
// model's loaded layers into a block, exactly. For a model with recurrent
// layers the block holds its attention layers' KV and, when to is the
// position the sequence's state is at, a snapshot of every DeltaNet
// layer's recurrent and convolution state (see appendSnapshot): a block
// without one cannot end a restore.
func (s *Sequence) ExportKV(from, to int) ([]byte, error) {
	if s.rec != nil && s.m.attentionLayers() == 0 {
		return nil, fmt.Errorf("model: %w: layers %v hold no KV to export with the state", ErrNoRewind, s.m.Layers)
	}
	b, err := s.cache.ReadKV(from, to)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if s.rec != nil {
		b = s.appendSnapshot(b, to)
	}
	return b, nil
}

// ImportKV appends the positions of an ExportKV block (of a sequence of
// the same model and layers) to the sequence: they are then as if the
// tokens had been run through Forward. A block of a model with recurrent
// layers sets their state when it carries a snapshot; one without leaves
// it behind the KV (Forward refuses the sequence until a later block's
// snapshot catches it up, or Truncate goes back to where the state is).
func (s *Sequence) ImportKV(block []byte) error {
	var snap []byte
	if s.rec != nil {
		var err error
		if block, snap, err = s.splitSnapshot(block); err != nil {
			return fmt.Errorf("model: %w", err)
		}
	}
	if err := s.cache.AppendKV(block); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	if snap != nil {
		s.restoreSnapshot(snap, s.cache.Len(s.m.Layers.Start))
	}
	return nil
}

// StateLen is the position every layer's state has reached: Len, except
// after importing KV blocks without a recurrent-state snapshot.
func (s *Sequence) StateLen() int {
	n := s.Len()
	for l := s.m.Layers.Start; l < s.m.Layers.End; l++ {
		n = min(n, s.layerLen(l))
	}
	return n
}
