package demotest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"fusion/engine/demo"
)

// Create writes what demo.Create writes, byte for byte, builds once per
// options, and gives every caller a copy of its own.
func TestCreateMatchesDemo(t *testing.T) {
	for _, opts := range []demo.Options{
		{Arch: "qwen3", Seed: 5, Layers: 1, Hidden: 32, Heads: 2, KVHeads: 1, Intermediate: 64, Format: demo.FormatSafetensors},
		{Arch: "qwen3", Seed: 5, Layers: 1, Hidden: 32, Heads: 2, KVHeads: 1, Intermediate: 64, Format: demo.FormatGGUF, GGUFType: "q8_0"},
	} {
		t.Run(opts.Format, func(t *testing.T) {
			want := filepath.Join(t.TempDir(), "want")
			if _, err := demo.Create(want, opts); err != nil {
				t.Fatal(err)
			}
			calls := 0
			a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
			for _, dir := range []string{a, b} {
				Write(t, dir, opts, func() (*demo.Model, error) { calls++; return demo.Build(opts) })
			}
			if calls != 1 {
				t.Errorf("built %d times, want once", calls)
			}
			if opts.Format == demo.FormatGGUF {
				want, a, b = demo.GGUFPath(want), demo.GGUFPath(a), demo.GGUFPath(b)
			}
			wantFiles := readAll(t, want)
			if len(wantFiles) == 0 {
				t.Fatal("demo.Create wrote nothing")
			}
			for _, dir := range []string{a, b} {
				got := readAll(t, dir)
				if len(got) != len(wantFiles) {
					t.Fatalf("%s: %d files, want %d", dir, len(got), len(wantFiles))
				}
				for name, w := range wantFiles {
					if !bytes.Equal(got[name], w) {
						t.Errorf("%s: %s differs from demo.Create's", dir, name)
					}
				}
			}
			// The copies are independent: changing one changes neither
			// the others nor what later callers get.
			for name := range readAll(t, a) {
				p := filepath.Join(a, name)
				if opts.Format == demo.FormatGGUF {
					p = a
				}
				if err := os.WriteFile(p, []byte("changed"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			c := filepath.Join(t.TempDir(), "c")
			Write(t, c, opts, nil) // built already: build is not called
			if opts.Format == demo.FormatGGUF {
				c = demo.GGUFPath(c)
			}
			for _, dir := range []string{b, c} {
				for name, w := range readAll(t, dir) {
					if !bytes.Equal(w, wantFiles[name]) {
						t.Errorf("%s: %s changed with another copy", dir, name)
					}
				}
			}
		})
	}
}

// readAll reads a model directory's files, or a GGUF file under "".
func readAll(t *testing.T, path string) map[string][]byte {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	if !st.IsDir() {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out[""] = b
		return out
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(path, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}
