package runner

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fusion/engine/demo"
)

// TestSetModelSettingsLive: settings changed while a model is loaded take
// effect without a reload (context cap, pin, its own idle TTL with no
// runner TTL); a new chat template unloads the idle model, whose next load
// renders with it.
func TestSetModelSettingsLive(t *testing.T) {
	r := newRunnerWith(t, Config{}, map[string]demo.Options{"a": {Arch: "qwen3", Seed: 1}})
	ctx := context.Background()
	if got := generate(ctx, r, chat("a", "Hello", 2)); got.err != nil {
		t.Fatal(got.err)
	}
	r.SetModelSettings("a", ModelSettings{ContextLength: 12, Pinned: true})
	if st := states(r)["a"]; st.State != StateIdle || !st.Pinned {
		t.Fatalf("after pinning: %+v", st)
	}
	if got := generate(ctx, r, chat("a", strings.Repeat("Hello there ", 10), 2)); got.err == nil || !strings.Contains(got.err.Error(), "context is 12") {
		t.Fatalf("the new context cap is not in force: %v", got.err)
	}
	r.SetModelSettings("a", ModelSettings{IdleTTL: 100 * time.Millisecond})
	waitFor(t, func() bool { return states(r)["a"].State == StateUnloaded })

	if got := generate(ctx, r, chat("a", "Hello", 2)); got.err != nil {
		t.Fatal(got.err)
	}
	const tmpl = "{% for m in messages %}OVERRIDE {{ m.content }}{% endfor %}"
	r.SetModelSettings("a", ModelSettings{ChatTemplate: tmpl})
	if st := states(r)["a"]; st.State != StateUnloaded {
		t.Fatalf("an idle model whose template changed stays loaded: %+v", st)
	}
	lm, release, err := r.acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if lm.text.TemplateSource() != tmpl {
		t.Errorf("template after reload: %q", lm.text.TemplateSource())
	}
}

// TestDetails: a config this engine cannot load is reported, not an
// error; every family reports its architecture (mistral3's and
// ministral3's dims and context length from their text_config, the
// quantization from the top; a multimodal gemma3 checkpoint as its text
// model, gemma3_text) and generates.
func TestDetails(t *testing.T) {
	r := newRunnerWith(t, Config{}, map[string]demo.Options{"a": {Arch: "qwen3", Seed: 1},
		"phi": {Arch: "phi3", Quantize: 4, GroupSize: 32, Seed: 2}, "m3": {Arch: "mistral3", Seed: 3}, "oss": {Arch: "gpt_oss", Seed: 4},
		"min3": {Arch: "ministral3", Seed: 5}, "g3mm": {Arch: "gemma3_text", Layers: 2, SlidingWindow: 16, SlidingPattern: 2, Multimodal: true, Seed: 6}})
	raw, err := os.ReadFile(filepath.Join(r.cfg.ModelsDir, "a", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(r.cfg.ModelsDir, "paro")
	if err := os.MkdirAll(bad, 0o755); err != nil {
		t.Fatal(err)
	}
	paro := strings.Replace(string(raw), "{", `{"quantization_config":{"quant_method":"paroquant","bits":4,"group_size":128},`, 1)
	if err := os.WriteFile(filepath.Join(bad, "config.json"), []byte(paro), 0o644); err != nil {
		t.Fatal(err)
	}
	// mlx-lm's nvfp4 with per-expert global scales (quantize_model's
	// global_scale): listed as not compatible, with the reason, before
	// any load.
	nv := filepath.Join(r.cfg.ModelsDir, "nv")
	if err := os.MkdirAll(nv, 0o755); err != nil {
		t.Fatal(err)
	}
	nvfp4 := strings.Replace(string(raw), "{", `{"quantization":{"group_size":16,"bits":4,"mode":"nvfp4",`+
		`"model.layers.0.mlp.switch_mlp.up_proj":{"group_size":16,"bits":4,"mode":"nvfp4","global_scale":true}},`, 1)
	if err := os.WriteFile(filepath.Join(nv, "config.json"), []byte(nvfp4), 0o644); err != nil {
		t.Fatal(err)
	}
	got := map[string]ModelDetails{}
	for _, d := range r.Details() {
		got[d.ID] = d
	}
	if a := got["a"]; !a.Compatible || a.Architecture != "qwen3" || a.ContextLength <= 0 || a.Bytes <= 0 || a.Format != "safetensors" {
		t.Errorf("a: %+v", a)
	}
	if p := got["phi"]; !p.Compatible || p.Architecture != "phi3" || p.ContextLength != 131072 || p.Quantization != "affine 4-bit/32" {
		t.Errorf("phi: %+v", p)
	}
	if m := got["m3"]; !m.Compatible || m.Architecture != "mistral3" || m.ModelType != "mistral3" || m.ContextLength != 32768 {
		t.Errorf("m3: %+v", m)
	}
	if o := got["oss"]; !o.Compatible || o.Architecture != "gpt_oss" || o.ContextLength != 131072 {
		t.Errorf("oss: %+v", o)
	}
	if m := got["min3"]; !m.Compatible || m.Architecture != "ministral3" || m.ModelType != "mistral3" || m.ContextLength != 262144 {
		t.Errorf("min3: %+v", m)
	}
	if g := got["g3mm"]; !g.Compatible || g.Architecture != "gemma3_text" || g.ModelType != "gemma3" || g.ContextLength != 32768 {
		t.Errorf("g3mm: %+v", g)
	}
	for _, id := range []string{"phi", "m3", "oss", "min3", "g3mm"} {
		if res := generate(context.Background(), r, chat(id, "Hello", 4)); res.err != nil || len(res.ids) != 4 {
			t.Errorf("%s: generation: %+v", id, res)
		}
	}
	if n := got["nv"]; n.Compatible || n.Quantization != "nvfp4" || !strings.Contains(n.Reason, "global_scale") {
		t.Errorf("nv: %+v", n)
	}
	if p := got["paro"]; p.Compatible || p.Quantization != "paroquant" || !strings.Contains(p.Reason, "quant_method") {
		t.Errorf("paro: %+v", p)
	}
}
