package tokenizer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/text/unicode/norm"

	"fusion/engine/tokenizer"
	"fusion/engine/tokenizer/corpus"
	"fusion/internal/testenv"
)

// corpusSize is the number of generated strings every real tokenizer is
// compared with HF tokenizers on.
const corpusSize = 24000

// withSpecialSubset is how many of them are also compared with special
// tokens added (Llama 3's BOS).
const withSpecialSubset = 4000

// parityFixtures are the real tokenizers compared, with the number of
// corpus strings each is compared on: Llama 3.2 has Llama 3.1's vocabulary
// and pattern and differs in the format of its merges, so a part of the
// corpus is enough for it; Llama 2 shares Gemma 3's SentencePiece-style
// pipeline (with a Prepend normalizer and a Strip decoder), and its
// vocabulary runs again in TestMetaspaceParityWithHF, so a part is enough
// there too.
var parityFixtures = []struct {
	name    string
	strings int
}{
	{"qwen3", corpusSize},
	{"llama3_1", corpusSize},
	{"deepseek_v3", corpusSize},
	{"llama3_2", corpusSize / 4},
	{"gemma3", corpusSize},
	{"llama2", corpusSize / 4},
	{"gptoss", corpusSize},
}

// TestParityWithHF encodes the generated corpus with the real Qwen3,
// Llama 3.1, DeepSeek V3, Llama 3.2, Gemma 3, Llama 2 and gpt-oss (o200k_harmony)
// tokenizers and with HF tokenizers,
// and wants identical ids; it also checks decoding against HF and that
// decoding what was encoded gives the text back.
func TestParityWithHF(t *testing.T) {
	python := testenv.Python(t)
	all := corpus.Generate(20260101, corpusSize)
	for _, fixture := range parityFixtures {
		name, texts := fixture.name, all[:fixture.strings]
		t.Run(name, func(t *testing.T) {
			tok := loadFixture(t, name)
			ref := corpus.Reference{Python: python, TokenizerJSON: filepath.Join(testenv.TokenizerDir(t, name), "tokenizer.json")}
			ctx := context.Background()

			want, err := ref.Encode(ctx, texts, false)
			if err != nil {
				t.Fatal(err)
			}
			got := encodeAll(tok, texts, false)
			checkSameIDs(t, "add_special_tokens=false", texts, got, want)

			subset := texts[:withSpecialSubset]
			wantSpecial, err := ref.Encode(ctx, subset, true)
			if err != nil {
				t.Fatal(err)
			}
			checkSameIDs(t, "add_special_tokens=true", subset, encodeAll(tok, subset, true), wantSpecial)

			checkRoundTrip(t, name, tok, texts, got)
			checkDecodeParity(t, ctx, ref, tok)
		})
	}
}

// encodeAll encodes texts on two goroutines.
func encodeAll(tok *tokenizer.Tokenizer, texts []string, addSpecial bool) [][]int {
	out := make([][]int, len(texts))
	var wg sync.WaitGroup
	const workers = 2
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(texts); i += workers {
				out[i] = tok.Encode(texts[i], addSpecial)
			}
		})
	}
	wg.Wait()
	return out
}

// checkEncodeParity encodes texts with tok and with the reference, with
// and without the post-processor's special tokens, and wants the same ids.
func checkEncodeParity(t *testing.T, ctx context.Context, ref corpus.Reference, tok *tokenizer.Tokenizer, what string, texts []string) {
	t.Helper()
	for _, special := range []bool{false, true} {
		want, err := ref.Encode(ctx, texts, special)
		if err != nil {
			t.Fatal(err)
		}
		checkSameIDs(t, fmt.Sprintf("%sadd_special_tokens=%v", what, special), texts, encodeAll(tok, texts, special), want)
	}
}

// writeVariant writes a tokenizer.json document (a real one, edited) into
// a temporary directory for the reference, and builds it.
func writeVariant(t *testing.T, doc any) (string, *tokenizer.Tokenizer) {
	t.Helper()
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	return path, tok
}

// checkSameIDs reports the number of mismatches and the first few.
func checkSameIDs(t *testing.T, what string, texts []string, got, want [][]int) {
	t.Helper()
	var report []string
	mismatches := 0
	for i := range texts {
		if slices.Equal(got[i], want[i]) {
			continue
		}
		mismatches++
		if len(report) < 5 {
			report = append(report, fmt.Sprintf("text %d %q\n  fusion: %v\n  hf:     %v", i, texts[i], got[i], want[i]))
		}
	}
	t.Logf("%s: %d strings, %d mismatches", what, len(texts), mismatches)
	if mismatches > 0 {
		t.Errorf("%s: %d of %d strings differ from HF tokenizers; first ones:\n%s", what, mismatches, len(texts), strings.Join(report, "\n"))
	}
}

// checkRoundTrip wants Decode(Encode(s)) == s. Qwen normalizes its input
// to NFC, so there the text to get back is NFC(s); the SentencePiece
// tokenizers (Gemma 3, Llama 2) write spaces as "▁", so there a "▁" of the
// text comes back as a space (as with HF), and Llama 2's texts with its
// added tokens are left out (a space comes back after each).
func checkRoundTrip(t *testing.T, name string, tok *tokenizer.Tokenizer, texts []string, ids [][]int) {
	t.Helper()
	failures := 0
	for i, text := range texts {
		want := text
		switch name {
		case "qwen3":
			want = norm.NFC.String(text)
		case "gemma3", "llama2":
			want = strings.ReplaceAll(text, "▁", " ")
		}
		if name == "llama2" && containsAny(text, "<s>", "</s>", "<unk>") {
			continue // its Prepend normalizer adds "▁" after each added token, as HF's does
		}
		if got := tok.Decode(ids[i], false); got != want {
			failures++
			if failures <= 5 {
				t.Errorf("decode(encode(%q)) = %q", want, got)
			}
		}
	}
	if failures > 0 {
		t.Errorf("%d of %d strings do not survive encode then decode", failures, len(texts))
	}
}

// containsAny reports whether s contains one of subs.
func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// checkDecodeParity decodes random id lists (with special tokens, and ids
// that split characters) with both implementations, skipping special tokens
// or not.
func checkDecodeParity(t *testing.T, ctx context.Context, ref corpus.Reference, tok *tokenizer.Tokenizer) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 11))
	lists := make([][]int, 3000)
	for i := range lists {
		ids := make([]int, 1+rng.IntN(20))
		for j := range ids {
			ids[j] = rng.IntN(tok.VocabSize())
		}
		lists[i] = ids
	}
	for _, skip := range []bool{false, true} {
		want, err := ref.Decode(ctx, lists, skip)
		if err != nil {
			t.Fatal(err)
		}
		mismatches := 0
		for i, ids := range lists {
			if got := tok.Decode(ids, skip); got != want[i] {
				mismatches++
				if mismatches <= 5 {
					t.Errorf("Decode(%v, skipSpecial=%v) = %q, HF %q", ids, skip, got, want[i])
				}
			}
		}
		t.Logf("decode skip_special_tokens=%v: %d id lists, %d mismatches", skip, len(lists), mismatches)
	}
}
