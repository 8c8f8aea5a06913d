package node_test

import (
	"path/filepath"
	"testing"
	"time"

	"fusion/engine/demo"
	"fusion/engine/demo/demotest"
	"fusion/node/nodetest"
)

// TestPipelineGemma4: a gemma4_text of six layers (per-layer inputs,
// full layers twice as wide as sliding ones, layers 3–5 reading the KV
// of layers 1 and 2) placed in two stages is split where its KV-shared
// layers stay with their sources ([0, 1) and [1, 6): the inventory's
// MaxCut), the later layers' per-layer inputs travelling with the hidden
// state, and answers as one node does, greedy with logprobs.
func TestPipelineGemma4(t *testing.T) {
	models := t.TempDir()
	demotest.Create(t, filepath.Join(models, deepModel), demo.Options{Arch: "gemma4_text", Layers: 6, Hidden: 64, Heads: 2, KVHeads: 1,
		Intermediate: 64, SlidingWindow: 20, SlidingPattern: 2, Seed: 19})
	ref := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Backend: "cpu"})
	prompts := []string{"a gemma in two", "per-layer inputs"}
	want := map[string]answer{}
	for _, p := range prompts {
		a, _, err := greedyAnswers(ref.URL(), p)
		if err != nil {
			t.Fatal(err)
		}
		want[p] = a
	}
	nodes := startPipelineCluster(t, models)
	putPlacement(t, nodes["c"], `{"replicas":1,"stages":2}`)
	p := readyPipeline(t, nodes["a"], 2, 30*time.Second)
	t.Logf("pipeline: generation %d, stages %+v", p.Generation, p.Stages)
	if first := p.Stages[0].Layers; first[0] != 0 || first[1] != 1 {
		t.Errorf("first stage %v, want [0, 1) (layers 3–5 read layer 1's and 2's KV)", first)
	}
	for _, prompt := range prompts {
		got, servedBy, err := greedyAnswers(nodes["b"].URL(), prompt)
		for try := 0; err != nil && retryable(err) && try < 5; try++ {
			time.Sleep(500 * time.Millisecond)
			got, servedBy, err = greedyAnswers(nodes["b"].URL(), prompt)
		}
		switch {
		case err != nil:
			t.Errorf("%q: %v", prompt, err)
		case servedBy != p.Stages[0].Node:
			t.Errorf("%q served by %q, want the first stage %s", prompt, servedBy, p.Stages[0].Node)
		case got != want[prompt]:
			t.Errorf("%q:\n got %+v\nwant %+v", prompt, got, want[prompt])
		}
	}
}
