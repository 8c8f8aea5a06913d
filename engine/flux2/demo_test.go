package flux2

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCreateDemoLoadsInDiffusers: diffusers loads every component of the
// tiny checkpoint with no missing, unexpected or mismatched weight and no
// warning, as the classes model_index.json names, and the pipeline
// generates a finite, non-constant 64×64 image from it.
func TestCreateDemoLoadsInDiffusers(t *testing.T) {
	ref := reference(t)
	d := ref.Demo
	for name, info := range map[string]map[string][]string{"transformer": d.Transformer, "vae": d.VAE} {
		for k, v := range info {
			if len(v) > 0 {
				t.Errorf("%s: %s %v", name, k, v)
			}
		}
	}
	for _, w := range d.Warnings {
		t.Errorf("warning while loading: %s", w)
	}
	want := map[string]string{"transformer": "Flux2Transformer2DModel", "vae": "AutoencoderKLFlux2",
		"text_encoder": "Qwen3ForCausalLM", "scheduler": "FlowMatchEulerDiscreteScheduler"}
	for k, v := range want {
		if d.Classes[k] != v {
			t.Errorf("component %s is %s, want %s", k, d.Classes[k], v)
		}
	}
	if !strings.HasPrefix(d.Classes["tokenizer"], "Qwen2Tokenizer") {
		t.Errorf("tokenizer is %s", d.Classes["tokenizer"])
	}
	if len(d.ImageShape) != 4 || d.ImageShape[1] != 64 || d.ImageShape[2] != 64 || d.ImageShape[3] != 3 || !d.ImageFinite || d.ImageStd < 1e-3 {
		t.Errorf("image shape %v, finite %v, std %v", d.ImageShape, d.ImageFinite, d.ImageStd)
	}
}

// TestCreateDemoLayout: the files of the diffusers layout are there, the
// same seed writes the same bytes, and bad options are refused.
func TestCreateDemoLayout(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, dir := range []string{a, b} {
		if err := CreateDemo(dir, TinyDemo()); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{ModelIndexFile, SchedulerConfigFile, "transformer/config.json", "transformer/" + ComponentWeights,
		"vae/config.json", "vae/" + ComponentWeights, "text_encoder/config.json", "text_encoder/model.safetensors",
		"tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json"} {
		x, err := os.ReadFile(filepath.Join(a, f))
		if err != nil {
			t.Fatal(err)
		}
		y, _ := os.ReadFile(filepath.Join(b, f))
		if string(x) != string(y) {
			t.Errorf("%s differs between two runs with the same seed", f)
		}
	}
	for name, mod := range map[string]func(*DemoOptions){
		"dtype":      func(o *DemoOptions) { o.DType = "f8" },
		"rope axes":  func(o *DemoOptions) { o.Transformer.AxesDimsRoPE = []int{4, 4, 4} },
		"channels":   func(o *DemoOptions) { o.Transformer.InChannels = 12 },
		"te layers":  func(o *DemoOptions) { o.TextEncoder.Layers = 4 },
		"groups":     func(o *DemoOptions) { o.VAE.NormNumGroups = 3 },
		"joint dim":  func(o *DemoOptions) { o.Transformer.JointAttentionDim = 40 },
		"patch size": func(o *DemoOptions) { o.Transformer.PatchSize = 2 },
	} {
		o := TinyDemo()
		mod(&o)
		if err := CreateDemo(t.TempDir(), o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
