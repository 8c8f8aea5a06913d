package node_test

import (
	"path/filepath"
	"testing"
	"time"

	"fusion/engine/demo"
	"fusion/engine/demo/demotest"
	"fusion/engine/runner"
	"fusion/node/nodetest"
)

// TestPipelineRecurrentPrefixCache: a qwen3_5_moe demo of eight layers
// (Gated DeltaNet but for layers 3 and 7) placed in two stages on a
// three-node cluster. A long prompt asked twice through another node is
// restored the second time on both stages, up to the deepest state
// snapshot before its last token (cached_tokens over HTTP), and both
// answers, greedy and seeded with logprobs, are those of the model on one
// node.
func TestPipelineRecurrentPrefixCache(t *testing.T) {
	models := t.TempDir()
	demotest.Create(t, filepath.Join(models, deepModel), demo.Options{Arch: "qwen3_5_moe", Layers: 8, Hidden: 64, Heads: 4,
		KVHeads: 2, HeadDim: 16, Intermediate: 128, Experts: 4, ExpertsPerTok: 2, MoEIntermediate: 32, Seed: 23})
	content := longPrompt()
	request := func(seeded bool) map[string]any {
		r := map[string]any{"model": deepModel, "messages": []map[string]string{{"role": "user", "content": content}},
			"max_tokens": 12, "temperature": 0, "logprobs": true}
		if seeded {
			r["temperature"], r["seed"] = 1.1, 9
		}
		return r
	}
	ref := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Backend: "cpu"})
	want := map[bool]chatResult{}
	for _, seeded := range []bool{false, true} {
		want[seeded] = chatWith(t, ref.URL(), "k", request(seeded))
	}
	stop(t, ref)

	nodes := startPipelineCluster(t, models)
	putPlacement(t, nodes["c"], `{"replicas":1,"stages":2}`)
	var firstStage string
	waitUntil(t, 60*time.Second, "a ready pipeline of 2 stages", func() bool {
		_, doc := clusterDoc(t, nodes["a"].URL(), "k")
		for _, p := range doc.Placements {
			if p.Model != deepModel || len(p.Stages) != 2 {
				continue
			}
			for _, st := range p.Stages {
				if st.State != "ready" {
					return false
				}
			}
			t.Logf("pipeline: generation %d, stages %+v", p.Generation, p.Stages)
			firstStage = p.Stages[0].Node
			return true
		}
		return false
	})
	waitUntil(t, 30*time.Second, "node b's route to the first stage", func() bool {
		ids := routeIDs(nodes["b"], deepModel)
		return len(ids) == 1 && ids[0] == firstStage
	})
	every := 64 * runner.DefaultCacheStateEvery
	for _, seeded := range []bool{false, true} {
		w := want[seeded]
		hit := (w.Prompt - 1) / every * every
		if hit == 0 {
			t.Fatalf("a prompt of %d tokens has no snapshot before its last token", w.Prompt)
		}
		// The seeded run's prompt is the greedy one's: it is warm at once.
		for i, what := range []string{"cold", "warm"} {
			if seeded && i == 0 {
				continue
			}
			got := chatRetrying(t, nodes["b"].URL(), "k", request(seeded), 25)
			sameOutput(t, what, got, w)
			if wantCached := hit * i; got.Cached != wantCached {
				t.Errorf("%s (seeded %v): %d cached tokens, want %d", what, seeded, got.Cached, wantCached)
			}
		}
	}
}
