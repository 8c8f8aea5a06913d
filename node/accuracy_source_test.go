package node_test

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"

	"fusion/engine/quant/quanttest"
	"fusion/jobs"
	"fusion/node"
	"fusion/node/nodetest"
)

// TestAccuracyComparesWithSource: bench/accuracy of an oQ output finds
// the float model it was made from on its own (oQ records it in the
// output's config) and reports the perplexity and multiple-choice
// deltas; quantization to 4 bits costs the trained demo model a little
// perplexity on held-out text. "compare": false or "" scores the model
// alone, and a source changed since (its config) is not taken for the
// original.
func TestAccuracyComparesWithSource(t *testing.T) {
	models := nodetest.Models(t)
	copyLinks(t, quanttest.TrainedDemo(t), filepath.Join(models, "story"))
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, DataDir: t.TempDir()})
	code, out := adminDo(t, n, http.MethodPost, "/admin/api/oq/start", `{"model":"story","bits":4,"group_size":64}`)
	if code != http.StatusAccepted {
		t.Fatalf("oq: %d %v", code, out)
	}
	if j := waitJob(t, n, decodeJob(t, out).ID, final); j.State != jobs.Done {
		t.Fatalf("oq job %+v", j)
	}
	text, _ := json.Marshal(quanttest.StoryText(3, 2000))
	accuracy := func(compare string) node.AccuracyResult {
		t.Helper()
		body := `{"model":"story-oq4","window":64,"text":` + string(text) + compare + `}`
		code, out := adminDo(t, n, http.MethodPost, "/admin/api/bench/accuracy", body)
		if code != http.StatusAccepted {
			t.Fatalf("accuracy%s: %d %v", compare, code, out)
		}
		j := waitJob(t, n, decodeJob(t, out).ID, final)
		if j.State != jobs.Done {
			t.Fatalf("accuracy job%s: %+v", compare, j)
		}
		var res node.AccuracyResult
		if err := json.Unmarshal(j.Result, &res); err != nil {
			t.Fatal(err)
		}
		return res
	}

	res := accuracy(`,"multiple_choice":8`)
	if res.Compare != "story" || !res.CompareFound || res.Against == nil || res.PerplexityDelta == nil ||
		res.CompareChoice == nil || res.MultipleChoiceDelta == nil {
		t.Fatalf("the float original was not found: %+v", res)
	}
	d := *res.PerplexityDelta
	t.Logf("held-out perplexity: 4-bit %.4f, float original %.4f (Δ %+.4f, %+.1f%%); multiple choice %d/%d vs %d/%d (Δ %+.3f)",
		res.Score.Perplexity, res.Against.Perplexity, d, 100*d/res.Against.Perplexity,
		res.MultipleChoice.Correct, res.MultipleChoice.Questions, res.CompareChoice.Correct, res.CompareChoice.Questions, *res.MultipleChoiceDelta)
	// Quantization costs something, and little: under a tenth of the
	// float model's perplexity (measured: about 5%).
	if d <= 0 || d > 0.1*res.Against.Perplexity {
		t.Errorf("perplexity delta %+.4f of the 4-bit model against its original %.4f", d, res.Against.Perplexity)
	}
	if want := res.MultipleChoice.Accuracy - res.CompareChoice.Accuracy; *res.MultipleChoiceDelta != want {
		t.Errorf("multiple-choice delta %v, want %v", *res.MultipleChoiceDelta, want)
	}

	for _, off := range []string{`,"compare":false`, `,"compare":""`} {
		if res := accuracy(off); res.Compare != "" || res.Against != nil || res.PerplexityDelta != nil {
			t.Errorf("%s: compared with %q: %+v", off, res.Compare, res)
		}
	}
	// The source changed after the quantization: not its original any more.
	nodetest.EditModelJSON(t, models, "story", "config.json", map[string]any{"rms_norm_eps": 1e-6})
	if res := accuracy(""); res.Compare != "" || res.CompareFound {
		t.Errorf("a changed source was taken for the original: %+v", res)
	}
	// compare is a name, "", a boolean or null: anything else is a 400.
	for _, bad := range []string{`5`, `{}`, `["demo"]`} {
		code, out := adminDo(t, n, http.MethodPost, "/admin/api/bench/accuracy", `{"model":"story-oq4","compare":`+bad+`}`)
		if code != http.StatusBadRequest || errParam(out) != "compare" {
			t.Errorf("compare %s: %d %v, want 400 on compare", bad, code, out)
		}
	}
	// Named, compare still decides.
	if res := accuracy(`,"compare":"demo"`); res.Compare != "demo" || res.CompareFound {
		t.Errorf("compare named demo: %+v", res)
	}
}
