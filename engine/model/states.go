package model

import (
	"context"
	"fmt"
	"strings"

	"fusion/engine/backend"
	"fusion/engine/modelfile"
)

// bareSource reads a checkpoint whose weight names lack the "model."
// prefix (one saved from the bare decoder rather than the *ForCausalLM
// wrapper) under the prefixed names the architectures ask for.
type bareSource struct{ source }

func bare(name string) string { return strings.TrimPrefix(name, "model.") }

func (b bareSource) weight(path string) (backend.WeightData, error) {
	return b.source.weight(bare(path))
}
func (b bareSource) experts(path string) ([]backend.WeightData, error) {
	return b.source.experts(bare(path))
}
func (b bareSource) vector(name string) (backend.VectorData, error) {
	return b.source.vector(bare(name))
}
func (b bareSource) module(path string) (*modelfile.Linear, error) {
	return b.source.module(bare(path))
}
func (b bareSource) has(name string) bool { return b.source.has(bare(name)) }

// States runs whole token sequences (each from position 0, in fresh
// caches freed on return) through all the model's layers in one batch
// and returns each one's hidden states after the final norm, row-major
// [len(seq) × hidden_size]: what a decoder embedding model pools. The
// model must hold all its layers.
func (m *Model) States(ctx context.Context, seqs [][]int) ([][]float32, error) {
	if m.Layers != (Range{0, m.Config.NumHiddenLayers}) {
		return nil, fmt.Errorf("model: %w: States needs all layers, %v are loaded", ErrBadInput, m.Layers)
	}
	inputs := make([]Input, len(seqs))
	for i, seq := range seqs {
		s, err := m.NewSequence(max(len(seq), 1))
		if err != nil {
			return nil, err
		}
		defer s.Close()
		inputs[i] = Input{Seq: s, Tokens: seq}
	}
	b, err := m.batch(inputs, m.Layers, nil)
	if err != nil {
		return nil, err
	}
	s := m.be.NewStep(ctx)
	defer s.Close()
	x, _, err := m.run(ctx, s, inputs, m.Layers, nil, b)
	if err != nil {
		return nil, fmt.Errorf("model: states: %w", err)
	}
	data, err := s.Read(s.RMSNorm(x, m.norm, m.eps))
	if err != nil {
		return nil, fmt.Errorf("model: states: %w", err)
	}
	h := m.Config.HiddenSize
	out := make([][]float32, len(seqs))
	for i, seq := range seqs {
		n := len(seq) * h
		out[i], data = data[:n:n], data[n:]
	}
	return out, nil
}
