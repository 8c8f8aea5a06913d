package prompt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"fusion/engine/demo"
	"fusion/engine/demo/demotest"
	"fusion/engine/tokenizer"
)

// demoModel writes a demo model (a directory, or a GGUF file when format
// says so) under a fresh directory and returns its path.
func demoModel(t *testing.T, name, format string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if format == demo.FormatGGUF {
		path += ".gguf"
	}
	demotest.Create(t, path, demo.Options{Arch: "qwen3", Seed: 1, Format: format}) // built once per test binary
	return path
}

func mustGet(t *testing.T, c *Cache, path string) *Builder {
	t.Helper()
	b, err := c.Get(context.Background(), path)
	if err != nil {
		t.Fatalf("get %s: %v", path, err)
	}
	return b
}

// TestCacheParsesOnce: 100 lookups of a model parse it once and share one
// Builder.
func TestCacheParsesOnce(t *testing.T) {
	for _, format := range []string{demo.FormatSafetensors, demo.FormatGGUF} {
		t.Run(format, func(t *testing.T) {
			path := demoModel(t, "m", format)
			c := NewCache(0)
			first := mustGet(t, c, path)
			for range 99 {
				if b := mustGet(t, c, path); b != first {
					t.Fatal("a lookup returned another Builder")
				}
			}
			want := CacheStats{Entries: 1, Hits: 99, Parses: 1}
			if got := c.Stats(); got != want {
				t.Fatalf("stats %+v, want %+v", got, want)
			}
		})
	}
}

// TestCacheEvictsLeastRecentlyUsed: at its bound the cache drops the model
// used longest ago, and only that one.
func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	a, b, m3 := demoModel(t, "a", ""), demoModel(t, "b", ""), demoModel(t, "c", "")
	tests := []struct {
		name       string
		size       int
		uses       []string // in order
		then       string   // looked up last
		wantParsed bool     // whether the last lookup parsed again
		wantStats  CacheStats
	}{
		{"under the bound keeps all", 3, []string{a, b, m3}, a, false, CacheStats{Entries: 3, Hits: 1, Parses: 3}},
		{"the oldest goes", 2, []string{a, b, m3}, a, true, CacheStats{Entries: 2, Parses: 4, Evictions: 2}},
		{"a use refreshes", 2, []string{a, b, a, m3}, a, false, CacheStats{Entries: 2, Hits: 2, Parses: 3, Evictions: 1}},
		{"the refreshed one's neighbour goes", 2, []string{a, b, a, m3}, b, true, CacheStats{Entries: 2, Hits: 1, Parses: 4, Evictions: 2}},
		{"size one", 1, []string{a, b}, b, false, CacheStats{Entries: 1, Hits: 1, Parses: 2, Evictions: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCache(tt.size)
			for _, p := range tt.uses {
				mustGet(t, c, p)
			}
			before := c.Stats().Parses
			mustGet(t, c, tt.then)
			if parsed := c.Stats().Parses > before; parsed != tt.wantParsed {
				t.Errorf("last lookup parsed: %v, want %v", parsed, tt.wantParsed)
			}
			if got := c.Stats(); got != tt.wantStats {
				t.Errorf("stats %+v, want %+v", got, tt.wantStats)
			}
		})
	}
}

// later gives path a modification time an hour after its current one, so
// the change shows whatever the file system's timestamp resolution.
func later(t *testing.T, path string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	mt := st.ModTime().Add(time.Hour)
	if err := os.Chtimes(path, mt, mt); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCacheInvalidates: a change to any file the text side is read from
// loads it again, and the new Builder has the change; an unrelated file
// does not.
func TestCacheInvalidates(t *testing.T) {
	const tmpl = "{% for m in messages %}[{{ m.content }}]{% endfor %}"
	tests := []struct {
		name     string
		format   string
		change   func(t *testing.T, path string)
		reparsed bool
		check    func(t *testing.T, b *Builder)
	}{
		{"nothing changed", "", func(*testing.T, string) {}, false, nil},
		{"a weight file changed", "", func(t *testing.T, p string) { later(t, filepath.Join(p, "model.safetensors")) }, false, nil},
		{"tokenizer.json touched", "", func(t *testing.T, p string) { later(t, filepath.Join(p, "tokenizer.json")) }, true, nil},
		{"tokenizer_config.json rewritten", "", func(t *testing.T, p string) {
			write(t, filepath.Join(p, "tokenizer_config.json"), `{"chat_template": "`+tmpl+`"}`)
		}, true, func(t *testing.T, b *Builder) {
			if b.TemplateSource() != tmpl {
				t.Errorf("template %q, want %q", b.TemplateSource(), tmpl)
			}
		}},
		{"chat_template.jinja added", "", func(t *testing.T, p string) { write(t, filepath.Join(p, "chat_template.jinja"), tmpl) }, true,
			func(t *testing.T, b *Builder) {
				if b.TemplateSource() != tmpl {
					t.Errorf("template %q, want %q", b.TemplateSource(), tmpl)
				}
			}},
		{"generation_config.json removed", "", func(t *testing.T, p string) {
			if err := os.Remove(filepath.Join(p, "generation_config.json")); err != nil {
				t.Fatal(err)
			}
		}, true, nil},
		{"a named template added", "", func(t *testing.T, p string) {
			write(t, filepath.Join(p, tokenizer.AdditionalTemplatesDir, "tool_use.jinja"), tmpl)
		}, true, func(t *testing.T, b *Builder) {
			if got := b.Tokenizer().ChatTemplates()["tool_use"]; got != tmpl {
				t.Errorf("named template %q, want %q", got, tmpl)
			}
		}},
		{"a GGUF file touched", demo.FormatGGUF, func(t *testing.T, p string) { later(t, p) }, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := demoModel(t, "m", tt.format)
			c := NewCache(4)
			first := mustGet(t, c, path)
			tt.change(t, path)
			b := mustGet(t, c, path)
			want := CacheStats{Entries: 1, Hits: 1, Parses: 1}
			if tt.reparsed {
				want = CacheStats{Entries: 1, Parses: 2, Invalidations: 1}
			}
			if got := c.Stats(); got != want {
				t.Fatalf("stats %+v, want %+v", got, want)
			}
			if (b != first) != tt.reparsed {
				t.Errorf("new Builder: %v, want %v", b != first, tt.reparsed)
			}
			if tt.check != nil {
				tt.check(t, b)
			}
			if again := mustGet(t, c, path); again != b {
				t.Error("the lookup after the reload parsed again")
			}
		})
	}
}

// TestCacheConcurrentFirstLookups: lookups of a model that arrive while
// its first parse runs wait for that parse instead of starting their own.
func TestCacheConcurrentFirstLookups(t *testing.T) {
	const callers = 16
	path := demoModel(t, "m", "")
	c := NewCache(0)
	release := make(chan struct{})
	c.load = func(p string) (*Builder, error) {
		<-release
		return Load(p)
	}
	var wg sync.WaitGroup
	got := make([]*Builder, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = c.Get(context.Background(), path)
		}()
	}
	// Every caller but the parsing one is waiting on the parse before it
	// is let go; a cache without shared parses never gets here.
	deadline := time.Now().Add(30 * time.Second)
	for c.Stats().Shared != callers-1 {
		if time.Now().After(deadline) {
			close(release)
			wg.Wait()
			t.Fatalf("callers never shared the first parse: %+v", c.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	for i := range callers {
		if errs[i] != nil || got[i] == nil || got[i] != got[0] {
			t.Fatalf("caller %d: %p, %v (first %p)", i, got[i], errs[i], got[0])
		}
	}
	if st := c.Stats(); st.Parses != 1 || st.Shared != callers-1 {
		t.Fatalf("stats %+v, want 1 parse shared by %d callers", st, callers-1)
	}
}

// TestCacheWaitCancelled: a caller waiting for another's parse stops at
// its context's end; the parse goes on and is kept.
func TestCacheWaitCancelled(t *testing.T) {
	path := demoModel(t, "m", "")
	c := NewCache(0)
	started, release := make(chan struct{}), make(chan struct{})
	c.load = func(p string) (*Builder, error) {
		close(started)
		<-release
		return Load(p)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Get(context.Background(), path)
		done <- err
	}()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Get(ctx, path); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mustGet(t, c, path)
	if st := c.Stats(); st.Parses != 1 || st.Hits != 1 {
		t.Fatalf("stats %+v, want the one parse kept", st)
	}
}

// TestCacheErrors: a model whose files are missing or broken is an error,
// not kept: once fixed, the next lookup loads it.
func TestCacheErrors(t *testing.T) {
	c := NewCache(0)
	if _, err := c.Get(context.Background(), filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing model: %v", err)
	}
	path := demoModel(t, "m", "")
	tokPath := filepath.Join(path, "tokenizer.json")
	good, err := os.ReadFile(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	write(t, tokPath, "{broken")
	if _, err := c.Get(context.Background(), path); err == nil {
		t.Fatal("a broken tokenizer.json loaded")
	}
	if st := c.Stats(); st.Entries != 0 || st.Parses != 1 {
		t.Fatalf("after a failed load: %+v", st)
	}
	write(t, tokPath, string(good))
	later(t, tokPath)
	mustGet(t, c, path)
	if st := c.Stats(); st.Entries != 1 || st.Parses != 2 {
		t.Fatalf("after the fix: %+v", st)
	}
}
