package embed_test

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fusion/engine/backend/cpu"
	"fusion/engine/embed"
	"fusion/engine/embed/embedtest"
	"fusion/internal/testenv"
)

// TestRerankParityWithCrossEncoder scores query–document pairs (mixed
// languages and lengths, some past the 512-token limit on one side or
// both) with the cross-encoder fixture and with sentence-transformers'
// CrossEncoder.predict: the tokens and token types must be equal, and
// the scores equal within 1e-5.
func TestRerankParityWithCrossEncoder(t *testing.T) {
	checkRerankParity(t, testenv.Python(t), embedtest.CrossEncoder(t))
}

// TestXLMRobertaRerankParity is TestRerankParityWithCrossEncoder on a
// random-weight XLMRobertaForSequenceClassification (bge-reranker-v2-m3's
// architecture: RoBERTa's classification head, <s> q </s> </s> d </s>
// with the Unigram tokenizer, no token types).
func TestXLMRobertaRerankParity(t *testing.T) {
	checkRerankParity(t, testenv.Python(t), embedtest.XLMRReranker(t))
}

// checkRerankParity scores query–document pairs with the cross-encoder
// of dir and with sentence-transformers' CrossEncoder (see
// TestRerankParityWithCrossEncoder).
func checkRerankParity(t *testing.T, python, dir string) {
	if !embed.IsCrossEncoder(dir) {
		t.Fatal("the fixture is not recognised as a cross-encoder")
	}
	be := cpu.New(cpu.Options{})
	defer be.Close()
	ce, err := embed.LoadCrossEncoder(context.Background(), dir, be, false)
	if err != nil {
		t.Fatal(err)
	}
	defer ce.Close()
	if ce.MaxLen != 512 || ce.Activation != embed.ActSigmoid {
		t.Fatalf("max length %d, activation %s; want 512, sigmoid", ce.MaxLen, ce.Activation)
	}
	texts := sentences(96)
	long := strings.Repeat("retrieval augmented generation ranks passages ", 120)
	pairs := [][2]string{
		{"what is a vector database?", "A vector database stores embeddings and finds the nearest ones."},
		{"what is a vector database?", "The weather in Paris is mild in spring."},
		{"short query", long},      // the document is cut
		{long, "short document"},   // the query is cut
		{long, long + " and more"}, // both are cut, half each
		{"😀 emoji?", "emoji 😀 👍🏽 🚀"},
	}
	for i := 0; i+1 < len(texts); i += 2 {
		pairs = append(pairs, [2]string{texts[i], texts[i+1]})
	}
	refs := embedtest.CrossEncoderReference(t, python, dir, pairs)
	var seqs, types [][]int
	truncated := 0
	for i, p := range pairs {
		ids, ty, cut := ce.Pair(p[0], p[1])
		if cut {
			truncated++
		}
		if !slices.Equal(ids, refs[i].IDs) || !slices.Equal(ty, refs[i].Types) {
			t.Fatalf("pair %d: tokens differ from the reference:\nfusion %v\n    HF %v\ntypes %v\n   HF %v", i, ids, refs[i].IDs, ty, refs[i].Types)
		}
		seqs, types = append(seqs, ids), append(types, ty)
	}
	var scores []float32
	for lo := 0; lo < len(seqs); lo += 16 {
		hi := min(lo+16, len(seqs))
		got, err := ce.Scores(context.Background(), seqs[lo:hi], types[lo:hi])
		if err != nil {
			t.Fatal(err)
		}
		scores = append(scores, got...)
	}
	worst, lo, hi := 0.0, 1.0, 0.0
	for i, s := range scores {
		d := math.Abs(float64(s) - refs[i].Score)
		worst = max(worst, d)
		lo, hi = min(lo, refs[i].Score), max(hi, refs[i].Score)
		if d > 1e-5 {
			t.Errorf("pair %d: score %.7f, CrossEncoder %.7f", i, s, refs[i].Score)
		}
	}
	t.Logf("%d pairs (%d truncated): largest score difference %.1e; scores span [%.4f, %.4f]", len(pairs), truncated, worst, lo, hi)
	if truncated < 3 {
		t.Errorf("%d pairs were truncated; the cases should cut the query, the document and both", truncated)
	}
	if hi-lo < 0.2 {
		t.Errorf("scores span only [%.4f, %.4f]: the head does not discriminate, the test would prove little", lo, hi)
	}
}

// TestRerankIdentityActivation: a cross-encoder whose config names the
// identity activation scores with the raw logit, as CrossEncoder.predict
// does (σ(x) is far from x for every reference score, so applying the
// sigmoid would fail the comparison).
func TestRerankIdentityActivation(t *testing.T) {
	python := testenv.Python(t)
	dir := filepath.Join(t.TempDir(), "identity")
	if err := embedtest.WriteCrossEncoderWith(testenv.EmbeddingModelDir(t, "all-minilm-l6-v2"), dir, 5, embedtest.Identity); err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{})
	defer be.Close()
	ce, err := embed.LoadCrossEncoder(context.Background(), dir, be, false)
	if err != nil {
		t.Fatal(err)
	}
	defer ce.Close()
	if ce.Activation != embed.ActIdentity {
		t.Fatalf("activation %s, want identity", ce.Activation)
	}
	texts := sentences(16)
	var pairs [][2]string
	for i := 0; i+1 < len(texts); i += 2 {
		pairs = append(pairs, [2]string{texts[i], texts[i+1]})
	}
	refs := embedtest.CrossEncoderReference(t, python, dir, pairs)
	var seqs, types [][]int
	for _, p := range pairs {
		ids, ty, _ := ce.Pair(p[0], p[1])
		seqs, types = append(seqs, ids), append(types, ty)
	}
	scores, err := ce.Scores(context.Background(), seqs, types)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range scores {
		ref := refs[i].Score
		if d := math.Abs(float64(s) - ref); d > 1e-5 {
			t.Errorf("pair %d: score %.7f, CrossEncoder %.7f", i, s, ref)
		}
		if math.Abs(1/(1+math.Exp(-ref))-ref) < 1e-3 {
			t.Errorf("pair %d: CrossEncoder's %.7f is its own sigmoid: it cannot tell identity from sigmoid", i, ref)
		}
	}
}
