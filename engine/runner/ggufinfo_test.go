package runner

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fusion/engine/demo"
	"fusion/engine/gguf"
	"fusion/engine/model"
	"fusion/engine/modelfile"
)

// TestDetailsGGUFCached: listing the models reads a GGUF file's header
// once (counted through the cache's inspect seam); the next listing
// answers from the cache, a file rewritten (another size and time) or
// only touched (another time) is read again and judged anew, and a file gone from the models dir leaves the
// cache (the runner still lists it, incompatible).
func TestDetailsGGUFCached(t *testing.T) {
	r := newRunnerWith(t, Config{}, map[string]demo.Options{
		"g": {Arch: "qwen3", Seed: 7, Format: demo.FormatGGUF, GGUFType: "q8_0", Hidden: 256, Intermediate: 256, Layers: 1},
		"h": {Arch: "qwen3", Seed: 8, Format: demo.FormatGGUF, GGUFType: "q8_0", Hidden: 256, Intermediate: 256, Layers: 1}})
	reads := map[string]*atomic.Int64{}
	for _, id := range []string{"g", "h"} {
		reads[filepath.Join(r.cfg.ModelsDir, id+".gguf")] = new(atomic.Int64)
	}
	r.ggufInfo.inspect = func(path string) (*modelfile.Config, error) {
		if n, ok := reads[path]; ok {
			n.Add(1)
		} else {
			t.Errorf("inspected %s", path)
		}
		return model.InspectGGUF(path)
	}
	list := func() map[string]ModelDetails {
		got := map[string]ModelDetails{}
		for _, d := range r.Details() {
			got[d.ID] = d
		}
		return got
	}
	count := func(id string) int64 { return reads[filepath.Join(r.cfg.ModelsDir, id+".gguf")].Load() }

	first := list()
	second := list()
	for _, id := range []string{"g", "h"} {
		if !first[id].Compatible || first[id].Architecture != "qwen3" || first[id] != second[id] {
			t.Errorf("%s: first listing %+v, second %+v", id, first[id], second[id])
		}
		if n := count(id); n != 1 {
			t.Errorf("%s: header read %d times over two listings, want 1", id, n)
		}
	}

	// g rewritten as an architecture this engine lacks: read again, and
	// now incompatible; h untouched stays cached.
	path := filepath.Join(r.cfg.ModelsDir, "g.gguf")
	rewriteGGUF(t, path, path, func(kv gguf.KV) gguf.KV {
		if kv.Key == gguf.KeyArchitecture {
			kv.Value = gguf.String("mamba2")
		}
		return kv
	}, func(w gguf.WriteTensor) gguf.WriteTensor { return w })
	// mamba2 is a byte longer than qwen3, so the size changed; a new time
	// too, whatever the clock's resolution.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	third := list()
	if g := third["g"]; g.Compatible || !strings.Contains(g.Reason, "mamba2") {
		t.Errorf("g after its rewrite: %+v, want incompatible naming mamba2", g)
	}
	if n := count("g"); n != 2 {
		t.Errorf("g: header read %d times, want 2 (once more after the rewrite)", n)
	}
	if n := count("h"); n != 1 {
		t.Errorf("h: header read %d times, want 1", n)
	}
	// A new modification time alone (the same bytes) is a new version.
	if err := os.Chtimes(filepath.Join(r.cfg.ModelsDir, "h.gguf"), later, later); err != nil {
		t.Fatal(err)
	}
	if h := list()["h"]; !h.Compatible || count("h") != 2 {
		t.Errorf("h after a touch: %+v, header read %d times, want compatible and 2", h, count("h"))
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if g := list()["g"]; g.Compatible {
		t.Errorf("g after its removal: %+v, want incompatible", g)
	}
	if n := r.ggufInfo.len(); n != 1 {
		t.Errorf("%d files cached after g left the models dir, want 1 (h)", n)
	}
}
