// Package quanttest holds what tests of quantized models share: a
// seeded English text generator and a small demo model trained on it
// (testdata/train_demo.py of engine/quant), whose perplexities mean
// something, so that quantization's cost can be measured.
package quanttest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"fusion/engine/demo"
	"fusion/engine/tokenizer"
	"fusion/internal/testenv"
)

// StoryText writes about n bytes of simple English from a small seeded
// grammar (people doing things with objects at places and times). Three
// seeds give a training text, a calibration text and a held-out text of
// one distribution, so a model trained on the first has a perplexity on
// the others that means something.
func StoryText(seed uint64, n int) string {
	r := rand.New(rand.NewPCG(seed, 0x6f51))
	pick := func(s []string) string { return s[r.IntN(len(s))] }
	who := []string{"the baker", "the old fisherman", "a teacher", "the children", "my sister", "the captain",
		"a small dog", "the farmer", "the doctor", "her brother", "the mayor", "two sailors"}
	did := []string{"carried", "painted", "found", "sold", "repaired", "watched", "cleaned", "counted",
		"opened", "followed", "lost", "brought"}
	what := []string{"a basket of bread", "the red boat", "three old letters", "the broken gate", "a bowl of soup",
		"the wooden chair", "seven blue stones", "the garden wall", "a heavy box", "the kitchen window",
		"a map of the coast", "the last apple"}
	where := []string{"near the harbor", "in the market", "behind the school", "on the hill", "by the river",
		"at the station", "under the bridge", "in the village"}
	when := []string{"before noon", "after the rain", "every morning", "on Sunday", "late at night",
		"in the spring", "at dawn", "when the bells rang"}
	feel := []string{"happy", "tired", "surprised", "quiet", "proud", "worried"}
	var b strings.Builder
	for b.Len() < n {
		for i := 3 + r.IntN(4); i > 0; i-- {
			var s string
			switch r.IntN(5) {
			case 0:
				s = fmt.Sprintf("%s %s %s %s %s.", pick(who), pick(did), pick(what), pick(where), pick(when))
			case 1:
				s = fmt.Sprintf("%s, %s %s %s.", pick(when), pick(who), pick(did), pick(what))
			case 2:
				s = fmt.Sprintf("%s %s %s, and then %s %s %s %s.", pick(who), pick(did), pick(what), pick(who), pick(did), pick(what), pick(where))
			case 3:
				s = fmt.Sprintf("when %s %s %s, %s was %s.", pick(who), pick(did), pick(what), pick(who), pick(feel))
			default:
				s = fmt.Sprintf("%s was %s because %s %s %s.", pick(who), pick(feel), pick(who), pick(did), pick(what))
			}
			b.WriteString(strings.ToUpper(s[:1]) + s[1:] + " ")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TrainedOptions is the demo model trainedDemo trains: llama, f32, two
// layers of hidden 128 (every 2-D weight quantizable at group 64).
var TrainedOptions = demo.Options{Arch: "llama", DType: "f32", Hidden: 128, Intermediate: 256, Layers: 2, Seed: 11}

const (
	trainSteps = 200
	trainSeed  = 5
)

// TrainedDemo returns a float demo model trained by testdata/train_demo.py
// (transformers' llama, torch on the CPU) on StoryText(1, …): its perplexity on
// StoryText of other seeds is far below the vocabulary's. The result is
// cached under the user cache directory (fusion/oq-trained/KEY), KEY a
// hash of everything the training reads (script, token ids, demo
// options, steps, seed), since training takes a Python start and tens of
// seconds; a stale entry is never reused because any input change moves
// the key.
func TrainedDemo(t testing.TB) string {
	t.Helper()
	init := filepath.Join(t.TempDir(), "init")
	if _, err := demo.Create(init, TrainedOptions); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(init)
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode(StoryText(1, 60000), false)
	idsJSON, _ := json.Marshal(ids)
	_, here, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(here), "..", "testdata", "train_demo.py")
	code, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%+v\x00%d\x00%d", code, idsJSON, TrainedOptions, trainSteps, trainSeed)
	key := hex.EncodeToString(h.Sum(nil))[:20]
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "fusion", "oq-trained", key)
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
		return dir
	}
	py := testenv.Python(t)
	work := t.TempDir()
	idsPath := filepath.Join(work, "ids.json")
	if err := os.WriteFile(idsPath, idsJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, script, init, idsPath, filepath.Join(work, "w"), fmt.Sprint(trainSteps), fmt.Sprint(trainSeed)).CombinedOutput()
	if err != nil && !testenv.Required() && strings.Contains(string(out), "ModuleNotFoundError") {
		t.Skipf("%s lacks a module:\n%s", py, out)
	}
	if err != nil {
		t.Fatalf("training: %v\n%s", err, out)
	}
	t.Logf("trained %d tokens: %s", len(ids), strings.TrimSpace(string(out)))
	// The trained weights beside the demo's config and tokenizer, renamed
	// into the cache whole.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	stage, err := os.MkdirTemp(filepath.Dir(dir), ".train-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(stage)
	ents, _ := os.ReadDir(init)
	for _, e := range ents {
		from := filepath.Join(init, e.Name())
		if e.Name() == "model.safetensors" {
			from = filepath.Join(work, "w", e.Name())
		}
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(stage, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(stage, dir); err != nil && !os.IsExist(err) {
		if _, serr := os.Stat(filepath.Join(dir, "model.safetensors")); serr != nil {
			t.Fatal(err)
		}
	}
	return dir
}
