package tokenizer_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"fusion/engine/tokenizer"
	"fusion/engine/tokenizer/corpus"
	"fusion/internal/testenv"
)

// wordPieceExtra are texts aimed at the BERT normalizer and pre-tokenizer:
// accents, CJK, control characters, full-width and Unicode punctuation,
// words longer than max_input_chars_per_word, the special tokens in text.
var wordPieceExtra = []string{
	"", " ", "Hello, World!", "héllo wörld ÀÉÎÕÜ", "İstanbul ΣΊΣΥΦΟΣ straße",
	"北京是中国的首都。東京", "日本語のテキスト、カタカナ", "한국어 문장입니다",
	"tab\there\nnew\r\nline\x00nul\u200bzw\ufeffbom\u00adsoft",
	"price: $42.50 (approx.) — 100% «quoted» „de“ ¿qué?",
	"[CLS] [SEP] [MASK] [PAD] [UNK] [cls] [ MASK ]",
	"antidisestablishmentarianism supercalifragilisticexpialidocious",
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	"emoji 😀👍🏽👨‍👩‍👧 🥲 🫠 ❤️", "x² ½ ℌ ﬁ ﹏ １２３ ＡＢＣ", "don't won't I'm you're",
	"\U0001F9FF\U0001FAE8 \U000E0001 \uE000 \U00030000",
}

// TestWordPieceParityWithHF encodes the corpus the BPE tokenizers are
// checked on, plus BERT-specific texts, with all-MiniLM-L6-v2's WordPiece
// tokenizer and with HF tokenizers, and wants identical ids, with and
// without [CLS]/[SEP]; decoding is compared too.
func TestWordPieceParityWithHF(t *testing.T) {
	python := testenv.Python(t)
	dir := testenv.EmbeddingModelDir(t, "all-minilm-l6-v2")
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	texts := slices.Concat(wordPieceExtra, corpus.Generate(20260101, corpusSize))
	ref := corpus.Reference{Python: python, TokenizerJSON: filepath.Join(dir, "tokenizer.json")}
	ctx := context.Background()
	checkEncodeParity(t, ctx, ref, tok, "", texts)
	checkDecodeParity(t, ctx, ref, tok)
}
