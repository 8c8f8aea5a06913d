package piper

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fusion/engine/backend/cpu"
)

// TestLoadConfigRejects feeds LoadConfig configs that cannot be run.
func TestLoadConfigRejects(t *testing.T) {
	good := `{"audio": {"sample_rate": 22050}, "espeak": {"voice": "en-us"}, "phoneme_type": "espeak",
		"num_symbols": 4, "phoneme_id_map": {"_": [0], "^": [1], "$": [2], "a": [3]}}`
	cases := map[string]string{
		"not json":        `{"audio":`,
		"phoneme type":    strings.Replace(good, `"phoneme_type": "espeak"`, `"phoneme_type": "pinyin"`, 1),
		"no voice":        strings.Replace(good, `"voice": "en-us"`, `"voice": ""`, 1),
		"sample rate":     strings.Replace(good, `22050`, `0`, 1),
		"no symbols":      strings.Replace(good, `"num_symbols": 4`, `"num_symbols": 0`, 1),
		"no pad":          strings.Replace(good, `"_": [0], `, ``, 1),
		"id out of range": strings.Replace(good, `"a": [3]`, `"a": [4]`, 1),
	}
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.onnx.json")
	if err := os.WriteFile(ok, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(ok)
	if err != nil {
		t.Fatalf("good config: %v", err)
	}
	if ids, missing := c.IDs([]string{"a", "z"}); len(missing) != 1 || len(ids) != 5 {
		t.Errorf("IDs = %v, missing %q; want ^ _ a _ $ and z missing", ids, missing)
	}
	be := cpu.New(cpu.Options{})
	defer be.Close()
	if _, err := Load(context.Background(), t.TempDir(), be); !errors.Is(err, ErrNotPiper) {
		t.Errorf("Load of an empty directory = %v, want ErrNotPiper", err)
	}
	// A config beside a file that is not ONNX.
	if err := os.WriteFile(filepath.Join(dir, "ok.onnx"), []byte("not a model"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(context.Background(), dir, be); err == nil {
		t.Error("Load of a voice whose .onnx is garbage succeeded")
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".json")
			if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadConfig(p); !errors.Is(err, ErrConfig) {
				t.Fatalf("LoadConfig = %v, want ErrConfig", err)
			}
		})
	}
}

// TestSynthesizeRejects checks the limits of one synthesis on the real
// voice: ids outside the table, too many ids, a bad length scale, noise
// without a source; and that empty text is no sentences.
func TestSynthesizeRejects(t *testing.T) {
	v, _ := loadJoe(t)
	ctx := context.Background()
	cases := []struct {
		name string
		ids  []int64
		sc   Scales
	}{
		{"empty", nil, Scales{Length: 1}},
		{"negative id", []int64{1, -1, 2}, Scales{Length: 1}},
		{"id past the table", []int64{1, 256, 2}, Scales{Length: 1}},
		{"too many ids", make([]int64, MaxPhonemeIDs+1), Scales{Length: 1}},
		{"zero length scale", []int64{1, 0, 2}, Scales{}},
		{"huge length scale", []int64{1, 0, 2}, Scales{Length: 100}},
		{"noise without a source", []int64{1, 0, 2}, Scales{Length: 1, Noise: 0.5}},
	}
	for _, tc := range cases {
		if _, err := v.Synthesize(ctx, tc.ids, tc.sc, nil); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	n := 0
	if err := v.Speak(ctx, Espeak{}, "  \n ", Scales{Length: 1}, nil, func(Sentence) error { n++; return nil }); err != nil || n != 0 {
		t.Errorf("blank text: %d sentences, %v", n, err)
	}
	if _, err := (Espeak{}).Clauses(ctx, "en-us", strings.Repeat("a", MaxTextBytes+1)); err == nil {
		t.Error("text over MaxTextBytes accepted")
	}
	if _, err := (Espeak{Binary: filepath.Join(t.TempDir(), "no-espeak")}).Clauses(ctx, "en-us", "hi"); !errors.Is(err, ErrEspeak) {
		t.Errorf("missing espeak-ng: %v, want ErrEspeak", err)
	}
}
