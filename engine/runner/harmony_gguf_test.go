package runner

import (
	"path/filepath"
	"slices"
	"testing"

	"fusion/engine"
	"fusion/engine/demo"
	"fusion/engine/tokenizer"
	"fusion/internal/race"
	"fusion/internal/testenv"
)

// TestHarmonyServedGGUF serves a gpt-oss GGUF (llama.cpp's layout: MXFP4
// experts, sinks, the o200k tokenizer and the harmony template as
// metadata): the models list finds it compatible, thinking comes back as
// reasoning split from the answer by the harmony parser, and a forced
// tool call comes back parsed, its arguments valid.
func TestHarmonyServedGGUF(t *testing.T) {
	if race.Enabled {
		t.Skip("slow under -race (gpt-oss's 201,088-token vocabulary rebuilt from GGUF metadata: minutes); make test runs it without -race")
	}
	vocab := testenv.TokenizerDir(t, "gptoss")
	r := newRunnerWith(t, Config{Backend: suiteBackend(t)}, map[string]demo.Options{
		"oss": {Arch: "gpt_oss", Seed: 9, Format: demo.FormatGGUF, VocabFrom: vocab, Layers: 2, Hidden: 32, Heads: 2, KVHeads: 1,
			MoEIntermediate: 32, DType: "bf16"}})
	if files, _ := filepath.Glob(filepath.Join(r.cfg.ModelsDir, "*.gguf")); len(files) != 1 {
		t.Fatalf("GGUF files %v", files)
	}
	var listed bool
	for _, d := range r.Details() {
		if d.ID == "oss" {
			listed = true
			if !d.Compatible || d.Format != "gguf" || d.Architecture != "gpt_oss" {
				t.Errorf("listed as %+v", d)
			}
		}
	}
	if !listed {
		t.Fatal("the GGUF is not listed")
	}
	tok, err := tokenizer.Load(vocab)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := tok.TokenID("<|end|>")

	req := chat("oss", "Think first.", 24)
	req.StartThinking, req.ReasoningBudget = true, 5
	s := int64(1)
	req.Sampling.Seed, req.Sampling.Temperature = &s, 1
	out := generateHarmony(t, r, req)
	if out.final.Err != nil {
		t.Fatal(out.final.Err)
	}
	closed := slices.Index(out.ids, end)
	if closed < 0 || closed > 5 {
		t.Fatalf("<|end|> at %d of %v, want within the budget of 5", closed, out.ids)
	}
	if want := tok.Decode(out.ids[:closed], false); out.reasoning != want || out.reasoning == "" {
		t.Errorf("reasoning %q, want the analysis body %q", out.reasoning, want)
	}
	noHarmonyMarkers(t, "reasoning", out.reasoning)
	noHarmonyMarkers(t, "text", out.text)

	req = chat("oss", "Weather in Paris?", 60)
	req.Tools, req.ToolChoice = harmonyTools, engine.ToolChoice{Mode: engine.ToolNamed, Name: "get_weather"}
	req.Sampling.Seed, req.Sampling.Temperature = &s, 1.2
	out = generateHarmony(t, r, req)
	if out.final.Err != nil {
		t.Fatal(out.final.Err)
	}
	if out.final.FinishReason != engine.FinishToolCalls || len(out.calls) != 1 || out.calls[0].Name != "get_weather" || out.text != "" {
		t.Fatalf("finish %q, calls %+v, text %q", out.final.FinishReason, out.calls, out.text)
	}
	if err := validates(compileValidator(t, harmonyWeatherSchema), out.calls[0].Arguments); err != nil {
		t.Errorf("arguments %s: %v", out.calls[0].Arguments, err)
	}
}

// harmonyWeatherSchema is get_weather's parameters in harmonyTools.
const harmonyWeatherSchema = `{"type":"object","properties":{"city":{"type":"string","maxLength":12},"days":{"type":"integer","maximum":9}},"required":["city"],"additionalProperties":false}`
