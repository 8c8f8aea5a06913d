package modelfile

import (
	"math"
	"testing"
)

func TestHeadLayers(t *testing.T) {
	qwen06 := Config{HiddenSize: 1024, IntermediateSize: 3072, NumHiddenLayers: 28, NumAttentionHeads: 16,
		NumKeyValueHeads: 8, HeadDim: 128, VocabSize: 151936}
	moe := qwen06
	moe.MoE = &MoE{Experts: 8, TopK: 2, Intermediate: 768, SparseStep: 2}
	for _, tc := range []struct {
		name string
		c    Config
		want float64
	}{
		// 151,936 × 1,024 against 2·1024·2048 + 2·1024·1024 + 3·1024·3072 per layer.
		{"qwen3-0.6b", qwen06, 151936.0 * 1024 / (2*1024*2048 + 2*1024*1024 + 3*1024*3072)},
		// Every other layer reads 2 experts of 768 instead of 3072 wide.
		{"mixture", moe, 151936.0 * 1024 / (2*1024*2048 + 2*1024*1024 + (3*1024*3072+3*1024*768*2)/2.0)},
		{"no sizes", Config{}, 0},
	} {
		if got := tc.c.HeadLayers(); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
