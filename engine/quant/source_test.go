package quant

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"fusion/engine/demo"
)

// TestSourceRecorded: an oQ output's config records its source's name and
// hash, which match the source until its config or weights change; a
// model oQ did not make records nothing.
func TestSourceRecorded(t *testing.T) {
	src := demoDir(t, demo.Options{Hidden: 128, Intermediate: 256, Layers: 1})
	dst := filepath.Join(t.TempDir(), "q")
	res, err := Quantize(context.Background(), src, dst, Options{Bits: 4, GroupSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	h, err := SourceHash(src)
	if err != nil {
		t.Fatal(err)
	}
	s, ok, err := RecordedSource(dst)
	if err != nil || !ok || s != (Source{Model: "m", SHA256: h}) || res.Source == nil || *res.Source != s {
		t.Fatalf("recorded %+v %v %v, result %+v; want model m, hash %s", s, ok, err, res.Source, h)
	}
	if !s.Matches(src) || s.Matches(dst) {
		t.Errorf("the source does not match, or the output does")
	}
	if _, ok, err := RecordedSource(src); ok || err != nil {
		t.Errorf("a float model records a source: %v %v", ok, err)
	}
	// A file (a GGUF model) records none, and hashes as a file.
	file := filepath.Join(src, "model.safetensors")
	if _, ok, err := RecordedSource(file); ok || err != nil {
		t.Errorf("a file records a source: %v %v", ok, err)
	}
	if fh, err := SourceHash(file); err != nil || fh == h || len(fh) != 64 {
		t.Errorf("a file's hash %q %v", fh, err)
	}
	// A change to the source's config, or to a weights header (here the
	// file rewritten with one tensor less), is another model.
	b, _ := os.ReadFile(filepath.Join(src, "config.json"))
	if err := os.WriteFile(filepath.Join(src, "config.json"), append(b, ' '), 0o644); err != nil {
		t.Fatal(err)
	}
	if s.Matches(src) {
		t.Error("a changed config matches")
	}
	if err := os.WriteFile(filepath.Join(src, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	other := demoDir(t, demo.Options{Hidden: 128, Intermediate: 256, Layers: 2})
	if err := os.Rename(filepath.Join(other, "model.safetensors"), filepath.Join(src, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	if s.Matches(src) {
		t.Error("other weights match")
	}
}
