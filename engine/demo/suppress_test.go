package demo

import (
	"slices"
	"testing"
)

// TestSuppressUnties: suppressing tokens of a tied model unties it, so
// only the output rows lose the bias channel; the input rows (what the
// model reads when a suppressed token is forced in) keep it.
func TestSuppressUnties(t *testing.T) {
	m, err := Build(Options{Seed: 6})
	if err != nil {
		t.Fatal(err)
	}
	if !m.Params.TieEmbeddings {
		t.Fatal("the default demo model is not tied")
	}
	emb := slices.Clone(m.tensor("model.embed_tokens.weight").Data)
	if err := m.Suppress("</think>"); err != nil {
		t.Fatal(err)
	}
	p := m.Params
	id := slices.Index(m.Tokenizer.Tokens, "</think>")
	head, in := m.tensor("lm_head.weight"), m.tensor("model.embed_tokens.weight")
	switch {
	case p.TieEmbeddings || m.Config["tie_word_embeddings"] != false || head == nil:
		t.Fatalf("still tied: params %v, config %v, lm_head %v", p.TieEmbeddings, m.Config["tie_word_embeddings"], head != nil)
	case head.Data[id*p.Hidden+p.biasDim()] != 0:
		t.Errorf("the output row of </think> keeps its bias channel %v", head.Data[id*p.Hidden+p.biasDim()])
	case in.Data[id*p.Hidden+p.biasDim()] == 0 || !slices.Equal(in.Data, emb):
		t.Errorf("the input embedding changed (bias channel of </think>: %v)", in.Data[id*p.Hidden+p.biasDim()])
	}
	other := slices.Index(m.Tokenizer.Tokens, "<think>")
	if head.Data[other*p.Hidden+p.biasDim()] != emb[other*p.Hidden+p.biasDim()] {
		t.Error("a token not suppressed lost its output bias")
	}
}
