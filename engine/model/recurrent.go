package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"fusion/engine/backend"
	"fusion/engine/modelfile"
)

// ErrNoRewind: a sequence with recurrent layers was truncated to a
// position its state cannot go back to (only 0, or the current length,
// are possible without snapshots).
var ErrNoRewind = errors.New("recurrent state cannot rewind")

// recState is one sequence's state in one Gated DeltaNet layer, float32:
// the per-head [dv, dk] matrices and the last kernel−1 convolution
// inputs, and the positions it has consumed.
type recState struct {
	delta, conv []float32
	n           int
}

// Recurrent reports whether the model has layers whose state is not a KV
// cache (Gated DeltaNet): their sequences cannot be truncated to an
// earlier position other than 0, and an ExportKV block restores them only
// when it carries the state at its end (a snapshot, see ExportKV).
func (m *Model) Recurrent() bool {
	for l := m.Layers.Start; l < m.Layers.End; l++ {
		if m.Config.DeltaNet.Linear(l) {
			return true
		}
	}
	return false
}

// RecurrentBytes is the memory of one sequence's recurrent state over the
// loaded layers (float32; 0 for a model without recurrent layers). It
// does not grow with the sequence.
func (m *Model) RecurrentBytes() int64 {
	var n int64
	for l := m.Layers.Start; l < m.Layers.End; l++ {
		if m.Config.DeltaNet.Linear(l) {
			n += int64(m.Config.DeltaNet.StateFloats()) * 4
		}
	}
	return n
}

// kvSlot is the KV cache layer of attention layer l of a model with
// recurrent layers: only its attention layers have one, numbered from
// Layers.Start in order (a DeltaNet layer's state is not in the cache).
func (m *Model) kvSlot(l int) int {
	n := m.Layers.Start
	for i := m.Layers.Start; i < l; i++ {
		if !m.Config.DeltaNet.Linear(i) {
			n++
		}
	}
	return n
}

// attentionLayers is the number of loaded layers with a KV cache of their
// own.
func (m *Model) attentionLayers() int {
	if !m.Recurrent() {
		return m.cacheLayers().Len()
	}
	return m.kvSlot(m.Layers.End) - m.Layers.Start
}

// newRecStates makes a sequence's zero states for the model's recurrent
// layers (nil entries for the others), indexed by layer − Layers.Start.
func (m *Model) newRecStates() []*recState {
	d := m.Config.DeltaNet
	if !m.Recurrent() {
		return nil
	}
	out := make([]*recState, m.Layers.Len())
	for l := m.Layers.Start; l < m.Layers.End; l++ {
		if d.Linear(l) {
			out[l-m.Layers.Start] = &recState{
				delta: make([]float32, d.ValueHeads*d.ValueDim*d.KeyDim),
				conv:  make([]float32, (d.ConvKernel-1)*d.ConvDim()),
			}
		}
	}
	return out
}

// layerLen is the positions a sequence holds in layer l.
func (s *Sequence) layerLen(l int) int {
	if s.m.kvFrom != nil {
		l = s.m.kvFrom[l]
	}
	if s.rec != nil {
		if r := s.rec[l-s.m.Layers.Start]; r != nil {
			return r.n
		}
		l = s.m.kvSlot(l)
	}
	return s.cache.Len(l)
}

// truncateRec rewinds the recurrent layers to n: to 0 it clears them;
// to an earlier position it cannot, and the sequence refuses to run.
func (s *Sequence) truncateRec(n int) {
	for _, r := range s.rec {
		switch {
		case r == nil || n >= r.n:
		case n == 0:
			clear(r.delta)
			clear(r.conv)
			r.n = 0
			s.stale = false
		default:
			s.stale = true
		}
	}
}

// A block of a model with recurrent layers is the attention layers' KV
// block, then the snapshot (empty, or every DeltaNet layer's delta then
// conv state in layer order, float32 little-endian: RecurrentBytes), then
// an 8-byte little-endian trailer with the snapshot's length.
const snapTrailer = 8

// appendSnapshot appends to a KV block the sequence's recurrent state if
// it is at position to (an empty snapshot otherwise) and the trailer.
func (s *Sequence) appendSnapshot(b []byte, to int) []byte {
	at := !s.stale
	for _, r := range s.rec {
		if r != nil && r.n != to {
			at = false
		}
	}
	n := 0
	if at {
		n = int(s.m.RecurrentBytes())
		b = slices.Grow(b, n+snapTrailer)
		for _, r := range s.rec {
			if r != nil {
				b = appendFloats(b, r.delta)
				b = appendFloats(b, r.conv)
			}
		}
	}
	return binary.LittleEndian.AppendUint64(b, uint64(n))
}

// splitSnapshot parses a block of appendSnapshot into its KV part and its
// snapshot (nil when it carries none).
func (s *Sequence) splitSnapshot(block []byte) (kv, snap []byte, err error) {
	if len(block) < snapTrailer {
		return nil, nil, fmt.Errorf("%w: a block of %d bytes has no state trailer", ErrBadInput, len(block))
	}
	end := len(block) - snapTrailer
	n := binary.LittleEndian.Uint64(block[end:])
	want := uint64(s.m.RecurrentBytes())
	if n != 0 && n != want || n > uint64(end) {
		return nil, nil, fmt.Errorf("%w: a block's recurrent state of %d bytes, want %d", ErrBadInput, n, want)
	}
	if n == 0 {
		return block[:end], nil, nil
	}
	return block[:end-int(n)], block[end-int(n) : end], nil
}

// restoreSnapshot sets every recurrent layer's state from a snapshot
// taken at position n.
func (s *Sequence) restoreSnapshot(snap []byte, n int) {
	for _, r := range s.rec {
		if r != nil {
			snap = readFloats(r.delta, snap)
			snap = readFloats(r.conv, snap)
			r.n = n
		}
	}
	s.stale = false
}

func appendFloats(b []byte, f []float32) []byte {
	for _, x := range f {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// readFloats fills dst from the front of b and returns the rest.
func readFloats(dst []float32, b []byte) []byte {
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return b[4*len(dst):]
}

// recStep collects the recurrent layers' new states during a forward
// pass; commit stores them once the whole pass succeeded, so a failed
// step leaves every sequence as it was.
type recStep struct {
	seqs    []*Sequence
	pending []pendingState
}

type pendingState struct {
	seq         *Sequence
	layer       int
	delta, conv []float32
	n           int
}

func (r *recStep) commit() {
	for _, p := range r.pending {
		st := p.seq.rec[p.layer-p.seq.m.Layers.Start]
		copy(st.delta, p.delta)
		copy(st.conv, p.conv)
		st.n += p.n
	}
}

// states returns the batch's states at f's layer as two arrays of one row
// per sequence (delta, conv).
func (r *recStep) states(f *frame) (delta, conv backend.Array, lens []int) {
	var dd, cc []float32
	var dn, cn int
	for i, s := range r.seqs {
		st := s.rec[f.layer-s.m.Layers.Start]
		dd, cc = append(dd, st.delta...), append(cc, st.conv...)
		dn, cn = len(st.delta), len(st.conv)
		lens = append(lens, f.batch.Seqs[i].Len)
	}
	return f.Input(len(r.seqs), dn, dd), f.Input(len(r.seqs), cn, cc), lens
}

// keep reads the new states back (one Read each: on MLX a flush of the
// step's graph) and holds them until commit.
func (r *recStep) keep(f *frame, delta, conv backend.Array) {
	dd, err := f.Read(delta)
	if err == nil {
		var cc []float32
		if cc, err = f.Read(conv); err == nil {
			dn, cn := delta.Cols(), conv.Cols()
			for i, s := range r.seqs {
				r.pending = append(r.pending, pendingState{seq: s, layer: f.layer,
					delta: dd[i*dn : (i+1)*dn], conv: cc[i*cn : (i+1)*cn], n: f.batch.Seqs[i].Len})
			}
			return
		}
	}
	if f.err == nil {
		f.err = fmt.Errorf("layer %d recurrent state: %w", f.layer, err)
	}
}

// deltaNet is Qwen3-Next's Gated DeltaNet layer (mlx-lm's
// Qwen3NextGatedDeltaNet): q, k, v, the output gate z and the per-head
// a, b come from two projections whose rows are grouped by key head; q,
// k, v go through a causal depthwise convolution and SiLU, q and k are
// L2-normalized (q also scaled by 1/dk, k by dk^−½), the gated delta rule
// runs over them, and each value head's output is RMS-normed and gated by
// silu(z) before out_proj.
type deltaNet struct {
	qkvz, ba, out backend.Weight
	// qwen3_5's unfused projections (qkvz and ba nil): [q | k | v], z, b, a.
	qkv, z, b, a backend.Weight
	conv         backend.Vector // [convDim·kernel]
	aLog, dtBias backend.Vector // [hv]
	norm         backend.Vector // [dv]
	ones         backend.Vector // [dk], the L2 norm's unit weight
	d            *modelfile.DeltaNet
}

func loadDeltaNet(w *loader, prefix string) *deltaNet {
	d := w.cfg.DeltaNet
	kd, vd := d.KeyHeads*d.KeyDim, d.ValueHeads*d.ValueDim
	p := prefix + "linear_attn."
	h := w.cfg.HiddenSize
	n := &deltaNet{d: d}
	if d.Unfused {
		n.qkv = w.matrix(p+"in_proj_qkv", 2*kd+vd, h)
		n.z = w.matrix(p+"in_proj_z", vd, h)
		n.b = w.matrix(p+"in_proj_b", d.ValueHeads, h)
		n.a = w.matrix(p+"in_proj_a", d.ValueHeads, h)
	} else {
		n.qkvz = w.matrix(p+"in_proj_qkvz", 2*kd+2*vd, h)
		n.ba = w.matrix(p+"in_proj_ba", 2*d.ValueHeads, h)
	}
	n.out = w.matrix(p+"out_proj", h, vd)
	n.conv = w.vectorShaped(p+"conv1d.weight", int64(d.ConvDim()), int64(d.ConvKernel), 1)
	n.aLog = w.vectorShaped(p+"A_log", int64(d.ValueHeads))
	n.dtBias = w.vectorShaped(p+"dt_bias", int64(d.ValueHeads))
	n.norm = w.vectorShaped(p+"norm.weight", int64(d.ValueDim))
	n.ones = w.ones(d.KeyDim)
	return n
}

func (n *deltaNet) forward(f *frame, x backend.Array) backend.Array {
	d := n.d
	if d.Unfused {
		kd := d.KeyHeads * d.KeyDim
		qkv := f.Linear(x, n.qkv)
		q := f.HeadSlice(qkv, 1, 0, kd)
		k := f.HeadSlice(qkv, 1, kd, 2*kd)
		v := f.HeadSlice(qkv, 1, 2*kd, qkv.Cols())
		return n.mix(f, q, k, v, f.Linear(x, n.z), f.Linear(x, n.a), f.Linear(x, n.b))
	}
	nk, dk, dv, r := d.KeyHeads, d.KeyDim, d.ValueDim, d.ValueHeads/d.KeyHeads
	qkvz, ba := f.Linear(x, n.qkvz), f.Linear(x, n.ba)
	// Per key head: [q dk | k dk | v r·dv | z r·dv] and [b r | a r].
	q := f.HeadSlice(qkvz, nk, 0, dk)
	k := f.HeadSlice(qkvz, nk, dk, 2*dk)
	v := f.HeadSlice(qkvz, nk, 2*dk, 2*dk+r*dv)
	z := f.HeadSlice(qkvz, nk, 2*dk+r*dv, 2*dk+2*r*dv)
	b := f.HeadSlice(ba, nk, 0, r)
	a := f.HeadSlice(ba, nk, r, 2*r)
	return n.mix(f, q, k, v, z, a, b)
}

// mix is the layer after its projections: the convolution, the delta
// rule and the gated norm.
func (n *deltaNet) mix(f *frame, q, k, v, z, a, b backend.Array) backend.Array {
	d := n.d
	kd := d.KeyHeads * d.KeyDim
	delta, convState, lens := f.rec.states(f)
	conv, convNext := f.CausalConv(f.HeadConcat(f.HeadConcat(q, k, 1), v, 1), convState, n.conv, d.ConvKernel, lens)
	conv = f.SiLU(conv)
	q = f.HeadSlice(conv, 1, 0, kd)
	k = f.HeadSlice(conv, 1, kd, 2*kd)
	v = f.HeadSlice(conv, 1, 2*kd, conv.Cols())
	// normalize_qk: rms_norm with ε·dk⁻¹ is the L2 norm with ε, times √dk.
	invScale := 1 / float32(math.Sqrt(float64(d.KeyDim)))
	eps := 1e-6 * invScale * invScale
	q = f.Scale(f.RMSNorm(q, n.ones, eps), invScale*invScale)
	k = f.Scale(f.RMSNorm(k, n.ones, eps), invScale)
	y, deltaNext := f.GatedDelta(q, k, v, a, b, delta, n.aLog, n.dtBias, d.KeyHeads, lens)
	f.rec.keep(f, deltaNext, convNext)
	return f.Linear(f.SwiGLU(z, f.norm(y, n.norm)), n.out)
}
