package tokenizer_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"fusion/engine/tokenizer/corpus"
	"fusion/internal/testenv"
)

// TestMetaspaceParityWithHF rewrites Llama 2's tokenizer.json to the
// Metaspace form newer conversions use (no normalizer, a Metaspace
// pre-tokenizer and decoder) with each prepend scheme and split setting,
// and compares encoding and decoding with HF tokenizers.
func TestMetaspaceParityWithHF(t *testing.T) {
	python := testenv.Python(t)
	data, err := os.ReadFile(filepath.Join(testenv.TokenizerDir(t, "llama2"), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	texts := corpus.Generate(20260202, 2000)
	for _, tc := range []struct {
		scheme string
		split  bool
	}{{"first", true}, {"always", false}, {"never", true}} {
		t.Run(tc.scheme, func(t *testing.T) {
			var doc map[string]any
			if err := json.Unmarshal(data, &doc); err != nil {
				t.Fatal(err)
			}
			doc["normalizer"] = nil
			doc["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": tc.scheme, "split": tc.split}
			doc["decoder"] = map[string]any{"type": "Sequence", "decoders": []any{
				map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": tc.scheme, "split": tc.split},
				map[string]any{"type": "ByteFallback"},
				map[string]any{"type": "Fuse"},
			}}
			path, tok := writeVariant(t, doc)
			ref := corpus.Reference{Python: python, TokenizerJSON: path}
			ctx := context.Background()
			checkEncodeParity(t, ctx, ref, tok, "Metaspace "+tc.scheme+": ", texts)
			checkDecodeParity(t, ctx, ref, tok)
		})
	}
}

// TestStreamDecoderByteFallback streams Gemma 3's and Llama 2's ids: the
// corpus's, and random mixes of ordinary tokens, characters spelled as
// <0xNN> byte tokens (held back until whole) and cut characters followed
// by an ordinary token (U+FFFD per byte, as HF's ByteFallback decodes).
func TestStreamDecoderByteFallback(t *testing.T) {
	for _, name := range []string{"gemma3", "llama2"} {
		t.Run(name, func(t *testing.T) {
			tok := loadFixture(t, name)
			for _, text := range corpus.Generate(3, 300) {
				checkStream(t, tok, tok.Encode(text, false), false)
				checkStream(t, tok, tok.Encode(text, true), true)
			}
			byteID := func(b byte) int {
				id, ok := tok.TokenID("<0x" + string("0123456789ABCDEF"[b>>4]) + string("0123456789ABCDEF"[b&15]) + ">")
				if !ok {
					t.Fatalf("no byte token for %#x", b)
				}
				return id
			}
			euro := []int{byteID(0xE2), byteID(0x82), byteID(0xAC)}
			d := tok.NewStreamDecoder(false)
			for i, id := range euro {
				want := ""
				if i == 2 {
					want = "€"
				}
				if got := d.Add(id); got != want {
					t.Errorf("Add(byte %d of €) = %q, want %q", i, got, want)
				}
			}
			if got := tok.Decode(append(euro[:2:2], euro[:2]...), false); got != "\uFFFD\uFFFD\uFFFD\uFFFD" {
				t.Errorf("Decode(E2 82 E2 82) = %q, want four U+FFFD", got)
			}
			rng := rand.New(rand.NewPCG(8, 9))
			ordinary := func() int {
				for {
					id := rng.IntN(tok.VocabSize())
					if text, ok := tok.Token(id); ok && !(len(text) == 6 && text[:3] == "<0x") {
						return id
					}
				}
			}
			chars := []string{"€", "é", "🤗", "日", "\x00", "\n"}
			for range 2000 {
				var ids []int
				lastBytes := false
				for range 1 + rng.IntN(8) {
					switch k := rng.IntN(3); {
					case k == 0:
						for _, b := range []byte(chars[rng.IntN(len(chars))]) {
							ids = append(ids, byteID(b))
						}
						lastBytes = true
					case k == 1 && !lastBytes:
						c := []byte(chars[rng.IntN(4)])
						for _, b := range c[:1+rng.IntN(len(c)-1)] {
							ids = append(ids, byteID(b))
						}
						ids = append(ids, ordinary())
					default:
						ids = append(ids, ordinary())
						lastBytes = false
					}
				}
				checkStream(t, tok, ids, rng.IntN(2) == 0)
			}
		})
	}
}
