package pipeline

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"

	"google.golang.org/protobuf/proto"

	pb "fusion/cluster/pipelinepb"
	"fusion/engine/runner"
	"fusion/engine/sample"
)

// maxMaskVocab bounds the vocabulary a mask may declare (a hostile
// message must not make a stage allocate gigabytes).
const maxMaskVocab = 1 << 24

// The wire forms of the last stage's sampling (see runner's
// stagesample.go): the sampler's parameters once per sequence, a draw
// (generator state and allowed-token mask) per step, the drawn token
// back.

func encodeSampler(s *runner.StageSampler) *pb.Sampler {
	p := s.Params
	m := &pb.Sampler{
		Temperature: p.Temperature, TopK: int32(p.TopK), TopP: p.TopP, MinP: p.MinP,
		RepetitionPenalty: p.RepetitionPenalty, RepetitionWindow: int32(p.RepetitionWindow),
		PresencePenalty: p.PresencePenalty, FrequencyPenalty: p.FrequencyPenalty,
		Logprobs: p.Logprobs, TopLogprobs: int32(p.TopLogprobs), PromptLen: uint32(s.PromptLen),
		PrefixTokens: int32s(s.Prefix), MaxLen: uint32(s.MaxLen),
	}
	ids := make([]int, 0, len(p.LogitBias))
	for id := range p.LogitBias {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		m.BiasIds = append(m.BiasIds, int32(id))
		m.BiasValues = append(m.BiasValues, p.LogitBias[id])
	}
	for _, id := range p.StopTokenIDs {
		m.StopTokenIds = append(m.StopTokenIds, int32(id))
	}
	return m
}

func decodeSampler(m *pb.Sampler) (*runner.StageSampler, error) {
	if len(m.BiasIds) != len(m.BiasValues) {
		return nil, fmt.Errorf("pipeline: %d logit bias ids for %d values", len(m.BiasIds), len(m.BiasValues))
	}
	p := sample.Params{
		Temperature: m.Temperature, TopK: int(m.TopK), TopP: m.TopP, MinP: m.MinP,
		RepetitionPenalty: m.RepetitionPenalty, RepetitionWindow: int(m.RepetitionWindow),
		PresencePenalty: m.PresencePenalty, FrequencyPenalty: m.FrequencyPenalty,
		Logprobs: m.Logprobs, TopLogprobs: int(m.TopLogprobs),
	}
	if len(m.BiasIds) > 0 {
		p.LogitBias = make(map[int]float64, len(m.BiasIds))
		for i, id := range m.BiasIds {
			p.LogitBias[int(id)] = m.BiasValues[i]
		}
	}
	for _, id := range m.StopTokenIds {
		p.StopTokenIDs = append(p.StopTokenIDs, int(id))
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("pipeline: sampler: %w", err)
	}
	return &runner.StageSampler{Params: p, PromptLen: int(m.PromptLen), Prefix: ints(m.PrefixTokens), MaxLen: int(m.MaxLen)}, nil
}

// encodeMask writes b in its smallest form. The ids it covers are those
// below 64 × len(b).
func encodeMask(b sample.Bitset) *pb.Mask {
	vocab := 64 * len(b)
	allowed := 0
	for _, w := range b {
		allowed += bits.OnesCount64(w)
	}
	// A delta costs one to three bytes as a varint; two is the estimate.
	m := &pb.Mask{Vocab: uint32(vocab)}
	switch rawCost := vocab / 8; {
	case 2*allowed <= rawCost && allowed <= vocab-allowed:
		m.Kind, m.Deltas = pb.Mask_KIND_ALLOWED, maskDeltas(b, true, allowed)
	case 2*(vocab-allowed) <= rawCost:
		m.Kind, m.Deltas = pb.Mask_KIND_REJECTED, maskDeltas(b, false, vocab-allowed)
	default:
		m.Kind, m.Bits = pb.Mask_KIND_BITS, make([]byte, 8*len(b))
		for i, w := range b {
			for j := range 8 {
				m.Bits[8*i+j] = byte(w >> (8 * j))
			}
		}
	}
	return m
}

// maskDeltas lists the ids whose bit is set (or clear), as deltas.
func maskDeltas(b sample.Bitset, set bool, n int) []uint32 {
	out := make([]uint32, 0, n)
	prev := 0
	for w, word := range b {
		if !set {
			word = ^word
		}
		for ; word != 0; word &= word - 1 {
			id := 64*w + bits.TrailingZeros64(word)
			out = append(out, uint32(id-prev))
			prev = id
		}
	}
	return out
}

func decodeMask(m *pb.Mask) (sample.Bitset, error) {
	if m.Vocab > maxMaskVocab || m.Vocab%64 != 0 {
		return nil, fmt.Errorf("pipeline: mask of %d ids", m.Vocab)
	}
	b := sample.NewBitset(int(m.Vocab))
	switch m.Kind {
	case pb.Mask_KIND_BITS:
		if len(m.Bits) != 8*len(b) {
			return nil, fmt.Errorf("pipeline: mask of %d ids in %d bytes", m.Vocab, len(m.Bits))
		}
		for i := range b {
			for j := range 8 {
				b[i] |= uint64(m.Bits[8*i+j]) << (8 * j)
			}
		}
		return b, nil
	case pb.Mask_KIND_ALLOWED, pb.Mask_KIND_REJECTED:
		list := sample.NewBitset(int(m.Vocab))
		id := uint64(0)
		for i, d := range m.Deltas {
			if id += uint64(d); id >= uint64(m.Vocab) || i > 0 && d == 0 {
				return nil, fmt.Errorf("pipeline: mask id %d out of [0, %d) or repeated", id, m.Vocab)
			}
			list.Set(int(id))
		}
		if m.Kind == pb.Mask_KIND_ALLOWED {
			return list, nil
		}
		for i := range b {
			b[i] = ^list[i]
		}
		return b, nil
	}
	return nil, fmt.Errorf("pipeline: mask kind %v", m.Kind)
}

func encodeDraw(d *runner.StageDraw) *pb.Draw {
	m := &pb.Draw{Rng: d.RNG}
	if d.Mask != nil {
		m.Mask = encodeMask(d.Mask)
	}
	return m
}

func decodeDraw(m *pb.Draw) (*runner.StageDraw, error) {
	d := &runner.StageDraw{RNG: m.Rng}
	if len(d.RNG) == 0 {
		d.RNG = nil
	}
	if m.Mask != nil {
		var err error
		if d.Mask, err = decodeMask(m.Mask); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func encodeDrawn(id uint64, d *runner.StageDrawn) *pb.Drawn {
	m := &pb.Drawn{Id: id, Token: int32(d.ID), Stop: d.Stop, Logprob: d.Logprob, Rng: d.RNG}
	for _, t := range d.Top {
		m.TopIds = append(m.TopIds, int32(t.ID))
		m.TopLogprobs = append(m.TopLogprobs, t.Logprob)
	}
	switch {
	case errors.Is(d.Err, sample.ErrNoCandidates):
		m.NoCandidates = true
	case d.Err != nil:
		m.Error = d.Err.Error()
	}
	return m
}

func decodeDrawn(m *pb.Drawn) (*runner.StageDrawn, error) {
	if len(m.TopIds) != len(m.TopLogprobs) {
		return nil, fmt.Errorf("pipeline: %d top ids for %d logprobs", len(m.TopIds), len(m.TopLogprobs))
	}
	d := &runner.StageDrawn{Result: sample.Result{ID: int(m.Token), Stop: m.Stop, Logprob: m.Logprob}, RNG: m.Rng}
	if len(d.RNG) == 0 {
		d.RNG = nil
	}
	for i, id := range m.TopIds {
		d.Top = append(d.Top, sample.TokenLogprob{ID: int(id), Logprob: m.TopLogprobs[i]})
	}
	switch {
	case m.NoCandidates:
		d.Err = sample.ErrNoCandidates
	case m.Error != "":
		d.Err = fmt.Errorf("pipeline: the last stage's sampler: %s", m.Error)
	}
	return d, nil
}

// encodeSeq is a step's sequence on the wire.
func encodeSeq(s runner.StageSeq) *pb.Seq {
	m := &pb.Seq{Id: s.ID, Len: uint32(s.Len), MaxLen: uint32(s.MaxLen), Traceparent: s.Trace}
	if s.Sampler != nil {
		m.Sampler = encodeSampler(s.Sampler)
	}
	m.Tokens = int32s(s.Tokens)
	if s.Draw != nil {
		m.Draw = encodeDraw(s.Draw)
	}
	return m
}

func decodeSeq(m *pb.Seq) (runner.StageSeq, error) {
	s := runner.StageSeq{ID: m.Id, Len: int(m.Len), MaxLen: int(m.MaxLen), Trace: m.Traceparent}
	var err error
	if m.Sampler != nil {
		if s.Sampler, err = decodeSampler(m.Sampler); err != nil {
			return s, err
		}
	}
	s.Tokens = ints(m.Tokens)
	if m.Draw != nil {
		if s.Draw, err = decodeDraw(m.Draw); err != nil {
			return s, err
		}
	}
	return s, nil
}

// int32s and ints convert token ids to and from the wire (nil for none).
func int32s(v []int) []int32 {
	if len(v) == 0 {
		return nil
	}
	out := make([]int32, len(v))
	for i, id := range v {
		out[i] = int32(id)
	}
	return out
}

func ints(v []int32) []int {
	if len(v) == 0 {
		return nil
	}
	out := make([]int, len(v))
	for i, id := range v {
		out[i] = int(id)
	}
	return out
}

// sampledHere: a sequence whose step sends token ids has a sampler on the
// last stage, so its answer is a drawn token (with a draw) or nothing.
func sampledHere(s runner.StageSeq) bool { return len(s.Tokens) > 0 || s.Sampler != nil }

// protoMarshal is proto.Marshal (the tests size messages with it).
func protoMarshal(m proto.Message) ([]byte, error) { return proto.Marshal(m) }
