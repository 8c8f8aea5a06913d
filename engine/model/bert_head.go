package model

import (
	"fmt"
	"math"

	"fusion/engine/tensor"
)

// SequenceClassifier is the head of a BertForSequenceClassification
// checkpoint (a cross-encoder): the pooler, tanh(W·h + b) on the first
// token's last state, then a linear layer to the labels' logits; or the
// head of a (XLM-)RobertaForSequenceClassification one, the same
// computation. It is
// small (hidden² + hidden·labels values) and runs in Go on the pooled
// states, whatever the encoder's backend.
type SequenceClassifier struct {
	Labels         int
	hidden         int
	poolW, poolB   []float32
	classW, classB []float32
}

// LoadClassifier reads the head of the encoder's checkpoint: pooler.dense
// and classifier, with or without the "bert." prefix on the pooler; or
// RoBERTa's classifier.dense and classifier.out_proj.
func (e *Encoder) LoadClassifier() (*SequenceClassifier, error) {
	if e.weights == nil {
		return nil, fmt.Errorf("model: the encoder is closed")
	}
	h := e.Hidden()
	get := func(name string, shape ...int) ([]float32, error) {
		t, ok := e.weights.Tensor(name)
		if !ok {
			return nil, fmt.Errorf("%w: %s is missing", ErrBadWeights, name)
		}
		if len(t.Shape) != len(shape) {
			return nil, fmt.Errorf("%w: %s has shape %v, want %v", ErrBadWeights, name, t.Shape, shape)
		}
		for i, n := range shape {
			if n >= 0 && t.Shape[i] != int64(n) {
				return nil, fmt.Errorf("%w: %s has shape %v, want %v", ErrBadWeights, name, t.Shape, shape)
			}
		}
		v, err := tensor.Floats(t)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrBadWeights, name, err)
		}
		return v, nil
	}
	// BERT: the pooler, then classifier. RoBERTa's classification head
	// (XLMRobertaForSequenceClassification, bge-reranker-v2-m3) is the
	// same computation under other names: classifier.dense with tanh,
	// then classifier.out_proj.
	pool, class := "pooler.dense", "classifier"
	if e.weights.Has("bert.pooler.dense.weight") {
		pool = "bert.pooler.dense"
	}
	if e.weights.Has("classifier.out_proj.weight") {
		pool, class = "classifier.dense", "classifier.out_proj"
	}
	c := &SequenceClassifier{hidden: h}
	var err error
	if c.poolW, err = get(pool+".weight", h, h); err != nil {
		return nil, err
	}
	if c.poolB, err = get(pool+".bias", h); err != nil {
		return nil, err
	}
	if c.classW, err = get(class+".weight", -1, h); err != nil {
		return nil, err
	}
	c.Labels = len(c.classW) / h
	if c.Labels < 1 {
		return nil, fmt.Errorf("%w: %s.weight has no rows", ErrBadWeights, class)
	}
	if c.classB, err = get(class+".bias", c.Labels); err != nil {
		return nil, err
	}
	return c, nil
}

// Logits returns the label logits of one sequence from its last hidden
// states (the first token's row is used).
func (c *SequenceClassifier) Logits(states []float32) []float32 {
	h := c.hidden
	first := states[:h]
	pooled := make([]float32, h)
	for i := range h {
		sum := float64(c.poolB[i])
		for j, x := range c.poolW[i*h : (i+1)*h] {
			sum += float64(x) * float64(first[j])
		}
		pooled[i] = float32(math.Tanh(sum))
	}
	out := make([]float32, c.Labels)
	for i := range out {
		sum := float64(c.classB[i])
		for j, x := range c.classW[i*h : (i+1)*h] {
			sum += float64(x) * float64(pooled[j])
		}
		out[i] = float32(sum)
	}
	return out
}
