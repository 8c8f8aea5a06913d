package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"testing"

	"fusion/engine/demo"
)

// TestBenchCacheSmoke runs the cache benchmark (`fusion bench cache`) on a tiny demo model: the
// JSON has every case, the cached cases restored the prompt's whole blocks
// but its last token, and all agree on the first token (the command checks
// that itself and fails otherwise).
func TestBenchCacheSmoke(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	if _, err := demo.Create(dir, demo.DefaultOptions()); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	opts := DefaultCacheOptions()
	opts.Model, opts.Prompt, opts.Repeat, opts.Threads = dir, 192, 1, 1
	if err := Cache(context.Background(), opts, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var res struct {
		Cold, RAM, SSDPageCache struct {
			TTFT   float64 `json:"ttft_s"`
			Cached int     `json:"cached_tokens"`
		}
		Ratios map[string]float64
	}
	raw := out.Bytes()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	json.Unmarshal(m["cold"], &res.Cold)
	json.Unmarshal(m["ram"], &res.RAM)
	json.Unmarshal(m["ssd_page_cache"], &res.SSDPageCache)
	json.Unmarshal(m["ratios"], &res.Ratios)
	if res.Cold.Cached != 0 || res.RAM.Cached != 191 || res.SSDPageCache.Cached != 191 {
		t.Errorf("cached tokens: cold %d, RAM %d, SSD %d; want 0, 191, 191", res.Cold.Cached, res.RAM.Cached, res.SSDPageCache.Cached)
	}
	if res.Cold.TTFT <= 0 || res.Ratios["ram_speedup"] <= 0 || res.Ratios["ssd_speedup"] <= 0 {
		t.Errorf("figures missing: %s", raw)
	}
}
