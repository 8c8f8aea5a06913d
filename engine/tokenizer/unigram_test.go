package tokenizer_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"fusion/engine/tokenizer"
	"fusion/engine/tokenizer/corpus"
	"fusion/internal/testenv"
)

// unigramExtra are texts aimed at XLM-R's pipeline: what nmt_nfkc
// rewrites (compatibility forms, full-width letters, ligatures, odd
// spaces, control characters), combining sequences a grapheme long,
// runs of spaces, characters outside the vocabulary (unknown, fused),
// and the special tokens in text.
var unigramExtra = []string{
	"", " ", "  ", "Hello, World!", "héllo wörld ÀÉÎÕÜ", "he\u0301llo e\u0301 a\u0308 n\u0303",
	"Ａ\u0301 ﬁ\u0301 ①\u0308 Å ǅ ㍿ ｶﾀｶﾅ ｶﾞ ｷﾟ", "x² ½ ℌ ﬁ ﹏ １２３ ＡＢＣ ™ … ‼",
	"tab\there\nnew\r\nline\x00nul\u200bzw\ufeffbom\u00adsoft\u0085nel",
	"a\u00a0b\u3000c\u2009d  e   f    g", "  leading and trailing  ", "\r\n\r\n", "\u200d\u200c",
	"北京是中国的首都。東京", "日本語のテキスト、カタカナ", "한국어 문장입니다", "Ελληνικά και русский",
	"<s> </s> <pad> <unk> <mask> <s>x</s> <S>", "▁ ▁▁the ▁x",
	"emoji 😀👍🏽👨‍👩‍👧 🥲 🫠 ❤️ 🇫🇷", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛 ⅷ Ⅻ",
	"\U0001F9FF\U0001FAE8 \U000E0001 \uE000 \U00030000 ꙮꙮꙮ ᚠᚢᚦ ߷߷", "ᄀ\u1161\u11a8 각 ᄀ\u1161",
	"x\u0300\u0301\u0302\u0303 \u0915\u093f \u0e01\u0e34\u0e48",
}

// TestUnigramParityWithHF encodes the corpus the BPE tokenizers are
// checked on, plus XLM-R-specific texts, with the XLM-R tokenizer fixture
// (a SentencePiece unigram model converted by transformers) and with HF
// tokenizers, with and without <s> … </s>, and decodes random ids with
// both. It runs the tokenizer.json XLMRobertaTokenizer saves (Precompiled
// normalizer, WhitespaceSplit then Metaspace) and the one
// XLMRobertaConverter writes (Precompiled, Strip, Replace " {2,}").
func TestUnigramParityWithHF(t *testing.T) {
	python := testenv.Python(t)
	dir, err := corpus.XLMRTokenizer(context.Background(), python, testenv.FixturesDir())
	if err != nil {
		t.Fatal(err)
	}
	texts := slices.Concat(unigramExtra, corpus.Generate(20260101, corpusSize))
	for _, variant := range []string{".", "converter"} {
		t.Run(filepath.Base(filepath.Join("xlmr", variant)), func(t *testing.T) {
			path := filepath.Join(dir, variant, "tokenizer.json")
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			tok, err := tokenizer.FromJSON(data)
			if err != nil {
				t.Fatal(err)
			}
			ref := corpus.Reference{Python: python, TokenizerJSON: path}
			ctx := context.Background()
			checkEncodeParity(t, ctx, ref, tok, "", texts)
			checkDecodeParity(t, ctx, ref, tok)
		})
	}
}

// TestUnigramByteFallbackParityWithHF turns on byte_fallback in the XLM-R
// fixture, with the 256 <0xNN> tokens added to its vocabulary and the
// decoder's ByteFallback, and compares with HF tokenizers: unknown
// characters come out as their UTF-8 bytes.
func TestUnigramByteFallbackParityWithHF(t *testing.T) {
	python := testenv.Python(t)
	dir, err := corpus.XLMRTokenizer(context.Background(), python, testenv.FixturesDir())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	model := doc["model"].(map[string]any)
	model["byte_fallback"] = true
	vocab := model["vocab"].([]any)
	// Half the bytes: a character with a byte outside them stays unknown.
	for b := 0; b < 256; b += 1 + b%2 {
		vocab = append(vocab, []any{tokenByteName(b), -20.0})
	}
	model["vocab"] = vocab
	doc["decoder"] = map[string]any{"type": "Sequence", "decoders": []any{
		map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
		map[string]any{"type": "ByteFallback"},
		map[string]any{"type": "Fuse"},
	}}
	path, tok := writeVariant(t, doc)
	texts := slices.Concat(unigramExtra, corpus.Generate(20260303, 4000))
	ref := corpus.Reference{Python: python, TokenizerJSON: path}
	ctx := context.Background()
	want, err := ref.Encode(ctx, texts, false)
	if err != nil {
		t.Fatal(err)
	}
	got := encodeAll(tok, texts, false)
	checkSameIDs(t, "byte_fallback", texts, got, want)
	bytesSeen := 0
	for _, ids := range got {
		for _, id := range ids {
			if s, _ := tok.Token(id); len(s) == 6 && s[:3] == "<0x" {
				bytesSeen++
			}
		}
	}
	if bytesSeen == 0 {
		t.Error("no text was spelled in byte tokens; the test proves nothing")
	}
	checkDecodeParity(t, ctx, ref, tok)
}

func tokenByteName(b int) string {
	const hex = "0123456789ABCDEF"
	return "<0x" + string(hex[b>>4]) + string(hex[b&15]) + ">"
}

// TestUnigramLoadErrors: a hostile or broken Unigram tokenizer.json is
// refused with an error naming the part, never a panic.
func TestUnigramLoadErrors(t *testing.T) {
	model := func(extra string) string {
		return `{"model": {"type": "Unigram", "vocab": [["<unk>", 0.0], ["a", -1.0]]` + extra + `}, "added_tokens": []`
	}
	charsmap := func(b64 string) string {
		return model(`, "unk_id": 0`) + `, "normalizer": {"type": "Precompiled", "precompiled_charsmap": "` + b64 + `"}}`
	}
	for _, tc := range []struct{ name, doc string }{
		{"no unk_id", model("") + "}"},
		{"unk_id out of range", model(`, "unk_id": 2`) + "}"},
		{"negative unk_id", model(`, "unk_id": -1`) + "}"},
		{"vocab not a list", `{"model": {"type": "Unigram", "unk_id": 0, "vocab": {"a": 0}}}`},
		{"score not a number", `{"model": {"type": "Unigram", "unk_id": 0, "vocab": [["a", "x"]]}}`},
		{"empty vocab", `{"model": {"type": "Unigram", "unk_id": 0, "vocab": []}}`},
		{"charsmap not base64", charsmap("@@@")},
		{"charsmap empty", charsmap("")},
		{"charsmap too short", charsmap("AAA=")},                // 2 bytes
		{"trie larger than the data", charsmap("QAAAAAAAAAA=")}, // size 64, 4 bytes follow
		{"trie size not a multiple of 4", charsmap("AwAAAAAAAAA=")},
		{"strings not UTF-8", charsmap("BAAAAAAAAAD/")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tokenizer.FromJSON([]byte(tc.doc)); err == nil {
				t.Fatalf("accepted %s", tc.doc)
			} else {
				t.Log(err)
			}
		})
	}
}
