package embed_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"fusion/engine/backend/cpu"
	"fusion/engine/embed"
	"fusion/engine/embed/embedtest"
	"fusion/engine/tokenizer/corpus"
	"fusion/internal/testenv"
)

// minCosine is the agreement wanted with sentence-transformers.
const minCosine = 0.9999

// sentences returns n test sentences: natural-language ones in several
// languages and scripts with emoji, from one word to past the model's
// 256-token limit, and strings of the tokenizer corpus (code, odd white
// space, random code points).
func sentences(n int) []string {
	rng := rand.New(rand.NewPCG(21, 2026))
	words := [][]string{
		strings.Fields("the quick brown fox jumps over a lazy dog while embeddings measure how close two sentences are in meaning"),
		strings.Fields("der schnelle braune Fuchs springt über den faulen Hund während Straßenbahnen fahren"),
		strings.Fields("le renard brun rapide saute par-dessus le chien paresseux à côté de l'église où l'été"),
		strings.Fields("el rápido zorro marrón salta sobre el perro perezoso ¿verdad? ¡claro! niño año"),
		strings.Fields("быстрая коричневая лиса прыгает через ленивую собаку и смотрит на звёзды"),
		strings.Fields("敏捷的 棕色 狐狸 跳过 了 懒狗 我们 今天 学习 向量 检索"),
		strings.Fields("素早い 茶色の 狐が 怠け者の 犬を 飛び越える カタカナ ひらがな"),
		strings.Fields("빠른 갈색 여우가 게으른 개를 뛰어넘는다 오늘 날씨"),
		strings.Fields("الثعلب البني السريع يقفز فوق الكلب الكسول"),
		strings.Fields("तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है"),
		strings.Fields("😀 👍🏽 🚀 ❤️ 🎉 👨‍👩‍👧 🇫🇷 🔥 🤖 ✨"),
		strings.Fields("func main() { fmt.Println(\"hi\") } x := a[i]+b*2; // comment #42 $5.00 100% e=mc²"),
	}
	out := make([]string, 0, n)
	for len(out) < n*3/4 {
		length := 1 + rng.IntN(12)
		switch rng.IntN(6) {
		case 0:
			length = 20 + rng.IntN(60)
		case 1:
			length = 150 + rng.IntN(250) // past max_seq_length: truncated
		}
		var b strings.Builder
		for i := range length {
			if i > 0 {
				b.WriteString(" ")
			}
			lang := words[rng.IntN(len(words))]
			if rng.IntN(4) > 0 {
				lang = words[len(out)%len(words)]
			}
			b.WriteString(lang[rng.IntN(len(lang))])
			if rng.IntN(10) == 0 {
				b.WriteString([]string{".", ",", "!", "?", ";", ":"}[rng.IntN(6)])
			}
		}
		out = append(out, b.String())
	}
	for _, s := range corpus.Generate(7, 4*n) {
		if len(out) == n {
			break
		}
		if strings.TrimSpace(s) != "" {
			out = append(out, s)
		}
	}
	return out
}

// loadCPU loads the embedding model of dir on a CPU backend, closed with
// the test.
func loadCPU(t *testing.T, dir string) *embed.Model {
	t.Helper()
	be := cpu.New(cpu.Options{})
	t.Cleanup(func() { be.Close() })
	m, err := embed.Load(context.Background(), dir, be, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func cosine(a []float32, b []float64) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * b[i]
		na += float64(a[i]) * float64(a[i])
		nb += b[i] * b[i]
	}
	return dot / math.Sqrt(na*nb)
}

// TestParityWithSentenceTransformers embeds 512 sentences with
// all-MiniLM-L6-v2 and with sentence-transformers and wants a cosine
// similarity of at least 0.9999 for every one; it logs the smallest and
// the mean.
func TestParityWithSentenceTransformers(t *testing.T) {
	python := testenv.Python(t)
	dir := testenv.EmbeddingModelDir(t, "all-minilm-l6-v2")
	m := loadCPU(t, dir)
	if !reflect.DeepEqual(m.Config, embed.Config{Pooling: embed.PoolMean, Normalize: true, MaxSeqLen: 256}) {
		t.Fatalf("config %+v, want mean pooling, normalized, 256 tokens", m.Config)
	}
	texts := sentences(512)
	start := time.Now()
	refs := embedtest.STReference(t, python, dir, texts, "")
	t.Logf("sentence-transformers: %v", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	worst, sum, truncated := 1.0, 0.0, 0
	const batch = 16
	for lo := 0; lo < len(texts); lo += batch {
		hi := min(lo+batch, len(texts))
		var seqs [][]int
		for _, s := range texts[lo:hi] {
			ids, cut := m.Tokens(s, nil)
			if cut {
				truncated++
			}
			if want := refs[lo+len(seqs)].IDs; !slices.Equal(ids, want) {
				t.Fatalf("text %d: tokens %v, sentence-transformers %v", lo+len(seqs), ids, want)
			}
			seqs = append(seqs, ids)
		}
		got, err := m.Embed(context.Background(), seqs, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range got {
			if len(v) != 384 {
				t.Fatalf("text %d: %d dimensions", lo+i, len(v))
			}
			c := cosine(v, refs[lo+i].Vector)
			sum += c
			if c < worst {
				worst = c
			}
			if c < minCosine {
				t.Errorf("text %d %q: cosine %.6f with sentence-transformers", lo+i, trim(texts[lo+i]), c)
			}
		}
	}
	t.Logf("fusion: %v", time.Since(start).Round(time.Millisecond))
	t.Logf("%d sentences (%d truncated to 256 tokens): cosine min %.9f (1 − %.1e), mean %.9f", len(texts), truncated, worst, 1-worst, sum/float64(len(texts)))
	if truncated == 0 {
		t.Error("no sentence reached the 256-token limit; the corpus should test truncation")
	}
}

func trim(s string) string {
	if len(s) > 60 {
		return fmt.Sprintf("%s… (%d bytes)", s[:60], len(s))
	}
	return s
}
