package node_test

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"fusion/engine/demo"
	"fusion/engine/demo/demotest"
	"fusion/node/nodetest"
)

// TestGGUFMoEServed: a qwen3_moe demo written as safetensors and as GGUF
// (llama.cpp's qwen3moe: router ffn_gate_inp, stacked ffn_*_exps experts)
// is listed and served by the OpenAI route: the F32 GGUF answers greedily
// with the same tokens as the same weights in safetensors, and the Q4_K_M
// GGUF (Q4_K/Q6_K experts) and the Q3_K_M one (Q3_K/Q4_K experts, Q5_K
// attn_v, Q4_K attn_output) answer too.
func TestGGUFMoEServed(t *testing.T) {
	dir := t.TempDir()
	o := demo.Options{Arch: "qwen3_moe", Hidden: 256, Heads: 4, KVHeads: 2, Intermediate: 256, Layers: 2,
		Experts: 4, ExpertsPerTok: 2, MoEIntermediate: 256, DType: "f32", Seed: 23}
	demotest.Create(t, filepath.Join(dir, "moe-st"), o)
	o.Format, o.GGUFType = demo.FormatGGUF, "f32"
	demotest.Create(t, filepath.Join(dir, "moe-f32"), o) // moe-f32.gguf
	o.GGUFType = "q4_k_m"
	demotest.Create(t, filepath.Join(dir, "moe-q4_k_m"), o)
	o.GGUFType = "q3_k_m"
	demotest.Create(t, filepath.Join(dir, "moe-q3_k_m"), o)
	n := nodetest.Start(t, nodetest.Options{ModelsDir: dir})

	resp, err := http.Get(n.URL() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Data []struct{ ID string } }
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, m := range list.Data {
		ids[m.ID] = true
	}
	for _, id := range []string{"moe-st", "moe-f32", "moe-q4_k_m", "moe-q3_k_m"} {
		if !ids[id] {
			t.Errorf("/v1/models lacks %s: %v", id, ids)
		}
	}

	answer := func(model string) (text string, tokens int) {
		t.Helper()
		body := `{"model":"` + model + `","messages":[{"role":"user","content":"Tell me about experts."}],"max_tokens":16,"temperature":0}`
		resp, err := http.Post(n.URL()+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", model, resp.StatusCode, raw)
		}
		var r struct {
			Choices []struct{ Message struct{ Content string } }
			Usage   struct {
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		if err := json.Unmarshal(raw, &r); err != nil || len(r.Choices) != 1 {
			t.Fatalf("%s: %v: %s", model, err, raw)
		}
		return r.Choices[0].Message.Content, r.Usage.CompletionTokens
	}
	st, stN := answer("moe-st")
	gg, ggN := answer("moe-f32")
	if st != gg || stN != ggN || stN == 0 {
		t.Errorf("greedy answers differ: safetensors %q (%d tokens), F32 GGUF %q (%d tokens)", st, stN, gg, ggN)
	}
	for _, id := range []string{"moe-q4_k_m", "moe-q3_k_m"} {
		if q, qN := answer(id); qN == 0 {
			t.Errorf("%s: no tokens (%q)", id, q)
		}
	}
}
