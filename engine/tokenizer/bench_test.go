package tokenizer_test

import (
	"testing"

	"fusion/engine/tokenizer/corpus"
)

// BenchmarkEncode encodes the test corpus on one goroutine; `fusion bench
// tokenizer` compares the same figure with HF tokenizers.
func BenchmarkEncode(b *testing.B) {
	for _, name := range []string{"qwen3", "llama3_1", "deepseek_v3", "gptoss"} {
		b.Run(name, func(b *testing.B) {
			tok := loadFixture(b, name)
			texts := corpus.Generate(20260101, 24000)
			n := 0
			for _, s := range texts {
				n += len(s)
			}
			b.SetBytes(int64(n))
			for b.Loop() {
				for _, s := range texts {
					tok.Encode(s, false)
				}
			}
		})
	}
}
