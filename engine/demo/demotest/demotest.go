// Package demotest writes demo models for tests, building each one once
// per test binary. demo.Create spends seconds per model under the race
// detector (tokenizer training, random weights, quantization), and the
// same few models are written by dozens of tests of a package; here the
// first request for a model builds it, its files are kept in memory, and
// every request writes those bytes into the caller's own directory. So a
// test still gets a private copy it may edit, identical to what
// demo.Create would have written, for the price of a file copy.
package demotest

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"fusion/engine/demo"
)

// files is one built model: its files relative to the model directory (or
// the single GGUF file, under the name "").
type files struct {
	once sync.Once
	gguf bool
	data map[string][]byte
	err  error
}

// built holds the models of this test binary, by key (demo.Options, or a
// caller's key for a custom build).
var built sync.Map

// Create writes the model opts describe at dir as demo.Create(dir, opts)
// does (a GGUF model at demo.GGUFPath(dir)), building it only the first
// time the test binary asks for these options.
func Create(t testing.TB, dir string, opts demo.Options) {
	t.Helper()
	if err := CreateErr(dir, opts); err != nil {
		t.Fatal(err)
	}
}

// CreateErr is Create returning its error, for goroutines other than the
// test's (which must not call t.Fatal).
func CreateErr(dir string, opts demo.Options) error {
	return put(dir, opts, func() (*demo.Model, error) { return demo.Build(opts) })
}

// Write writes at dir the model build returns, calling build only the
// first time the test binary asks for key: a model demo.Options alone does
// not describe (built, then changed, as with Model.Suppress) gets a key of
// its own (any comparable value; different builds must not share one).
func Write(t testing.TB, dir string, key any, build func() (*demo.Model, error)) {
	t.Helper()
	if err := put(dir, key, build); err != nil {
		t.Fatal(err)
	}
}

func put(dir string, key any, build func() (*demo.Model, error)) error {
	v, _ := built.LoadOrStore(key, &files{})
	f := v.(*files)
	f.once.Do(func() { f.gguf, f.data, f.err = capture(build) })
	if f.err != nil {
		return fmt.Errorf("demo model %+v: %w", key, f.err)
	}
	if err := f.write(dir); err != nil {
		return fmt.Errorf("demo model %+v: %w", key, err)
	}
	return nil
}

// capture builds a model, writes it into a scratch directory with
// demo.Write and reads the files back.
func capture(build func() (*demo.Model, error)) (gguf bool, data map[string][]byte, err error) {
	m, err := build()
	if err != nil {
		return false, nil, err
	}
	scratch, err := os.MkdirTemp("", "demotest-")
	if err != nil {
		return false, nil, err
	}
	defer os.RemoveAll(scratch)
	dir := filepath.Join(scratch, "m")
	if err := demo.Write(dir, m); err != nil {
		return false, nil, err
	}
	data = map[string][]byte{}
	if m.Options.Format == demo.FormatGGUF {
		b, err := os.ReadFile(demo.GGUFPath(dir))
		data[""] = b
		return true, data, err
	}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		data[rel], err = os.ReadFile(path)
		return err
	})
	return false, data, err
}

// write puts the files at dir, replacing files of the same names and
// leaving others alone, as demo.Write does.
func (f *files) write(dir string) error {
	if f.gguf {
		path := demo.GGUFPath(dir)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		return os.WriteFile(path, f.data[""], 0o644)
	}
	for rel, b := range f.data {
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
	}
	return nil
}
