package model

import (
	"path/filepath"
	"strings"
	"testing"

	"fusion/engine/backend/cpu"
	"fusion/engine/demo"
	"fusion/engine/safetensors"
)

// TestGemmaMultimodalLayout loads Gemma 3 as mlx-community ships its 4B
// and larger models (create-demo --multimodal: model_type gemma3,
// text_config, weights under language_model. beside a vision tower) and
// the text-only checkpoint of the same seed: the same logits to the bit,
// and the same weight bytes, so the vision tower in the file is neither
// loaded nor counted. Gemma 4's wrapper goes through the same code
// (modelfile's gemmaMultimodalConfig, the demo's multimodal.go); parity
// with mlx-lm on both layouts: TestParityMLXFamilies' multimodal cases.
func TestGemmaMultimodalLayout(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for _, arch := range []string{"gemma3_text"} {
		t.Run(arch, func(t *testing.T) {
			o := demo.Options{Arch: arch, Layers: 4, Hidden: 64, Heads: 2, KVHeads: 1, Intermediate: 64, SlidingWindow: 16, SlidingPattern: 2, Seed: 7}
			text := filepath.Join(t.TempDir(), "text")
			if _, err := demo.Create(text, o); err != nil {
				t.Fatal(err)
			}
			o.Multimodal = true
			mm := filepath.Join(t.TempDir(), "multimodal")
			if _, err := demo.Create(mm, o); err != nil {
				t.Fatal(err)
			}
			f, err := safetensors.Open(filepath.Join(mm, "model.safetensors"), safetensors.LoadRead)
			if err != nil {
				t.Fatal(err)
			}
			vision := 0
			for _, ts := range f.Tensors() {
				if !strings.HasPrefix(ts.Name, "language_model.") {
					vision++
				}
			}
			f.Close()
			if vision < 3 {
				t.Fatalf("the multimodal file has %d tensors outside language_model., want its vision tower", vision)
			}
			a, b := load(t, be, text, Range{}), load(t, be, mm, Range{})
			if b.Config.ModelType != arch[:len("gemma3")] || b.Config.Architecture != arch {
				t.Fatalf("multimodal config: model_type %q, architecture %q", b.Config.ModelType, b.Config.Architecture)
			}
			if a.WeightBytes() != b.WeightBytes() {
				t.Errorf("weight bytes: text-only %d, multimodal %d (the vision tower must not be loaded)", a.WeightBytes(), b.WeightBytes())
			}
			toks := tokens(4, 40)
			want := forward(t, a, []Input{{Seq: newSeq(t, a), Tokens: toks, AllLogits: true}}, Range{}, nil).Logits[0]
			got := forward(t, b, []Input{{Seq: newSeq(t, b), Tokens: toks, AllLogits: true}}, Range{}, nil).Logits[0]
			sameBits(t, "multimodal vs text-only logits", got, want)
		})
	}
}
