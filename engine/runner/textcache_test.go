package runner

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"fusion/engine/chattemplate"
	"fusion/engine/prompt"
)

func stateOf(r *Runner, model string) ModelState {
	for _, m := range r.List() {
		if m.ID == model {
			return m.State
		}
	}
	return ""
}

func countChat(t *testing.T, r *Runner, model, text string) prompt.Result {
	t.Helper()
	res, err := r.Tokenize(context.Background(), model, prompt.Request{
		Messages: []*chattemplate.Object{chattemplate.NewObject("role", "user", "content", text)},
	})
	if err != nil {
		t.Fatalf("tokenize %s: %v", model, err)
	}
	return res
}

// TestTokenizeUnloadedParsesOnce: counting tokens 100 times for a model
// whose weights are not loaded parses its tokenizer once, leaves it
// unloaded, and loading it afterwards reuses that parse: the loaded model
// tokenizes with the very Builder the counts used.
func TestTokenizeUnloadedParsesOnce(t *testing.T) {
	r := newDemoRunner(t, Config{})
	models := []string{"demo", "demo-gguf"}
	want := map[string]int{}
	for i := range 100 {
		m := models[i%len(models)]
		res := countChat(t, r, m, "how many tokens?")
		if w, ok := want[m]; ok && res.Count != w {
			t.Fatalf("%s: count %d, then %d", m, w, res.Count)
		}
		want[m] = res.Count
	}
	if st := r.TextCacheStats(); st.Parses != 2 || st.Hits != 98 {
		t.Fatalf("text cache after 100 counts on 2 unloaded models: %+v, want 2 parses", st)
	}
	for _, m := range models {
		if s := stateOf(r, m); s != StateUnloaded {
			t.Fatalf("%s is %s after counting tokens", m, s)
		}
	}
	counted, err := r.textOf(context.Background(), "demo")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Load(context.Background(), "demo"); err != nil {
		t.Fatal(err)
	}
	e, _ := r.entry("demo")
	r.mu.Lock()
	lm := e.loaded
	r.mu.Unlock()
	if lm.text != counted {
		t.Error("the loaded model parsed its own tokenizer instead of sharing the counted one")
	}
	if got := countChat(t, r, "demo", "how many tokens?").Count; got != want["demo"] {
		t.Errorf("loaded count %d, unloaded %d", got, want["demo"])
	}
	if st := r.TextCacheStats(); st.Parses != 2 {
		t.Fatalf("text cache after loading: %+v, want still 2 parses", st)
	}
}

// TestTextCacheBound: TextCacheModels bounds the models kept parsed; the
// least recently counted one is parsed again.
func TestTextCacheBound(t *testing.T) {
	tests := []struct {
		size          int
		wantParses    int64
		wantEvictions int64
	}{
		{size: 1, wantParses: 3, wantEvictions: 2},
		{size: 2, wantParses: 2},
		{size: 0, wantParses: 2}, // the default holds both
	}
	for _, tt := range tests {
		r := newDemoRunner(t, Config{TextCacheModels: tt.size})
		for _, m := range []string{"demo", "demo-gguf", "demo", "demo"} {
			countChat(t, r, m, "hi")
		}
		st := r.TextCacheStats()
		if st.Parses != tt.wantParses || st.Evictions != tt.wantEvictions || st.Entries > max(tt.size, DefaultTextCacheModels) {
			t.Errorf("size %d: %+v, want %d parses, %d evictions", tt.size, st, tt.wantParses, tt.wantEvictions)
		}
	}
}

// TestTokenizeSeesTemplateChange: a chat template written into an
// unloaded model's directory is used by the next count.
func TestTokenizeSeesTemplateChange(t *testing.T) {
	r := newDemoRunner(t, Config{})
	before := countChat(t, r, "demo", "hello")
	if err := os.WriteFile(filepath.Join(r.cfg.ModelsDir, "demo", "chat_template.jinja"),
		[]byte("{% for m in messages %}<<{{ m.content }}>>{% endfor %}"), 0o644); err != nil {
		t.Fatal(err)
	}
	after := countChat(t, r, "demo", "hello")
	if after.Prompt != "<<hello>>" || after.Prompt == before.Prompt {
		t.Fatalf("prompt after the template changed: %q (before %q)", after.Prompt, before.Prompt)
	}
	if st := r.TextCacheStats(); st.Parses != 2 || st.Invalidations != 1 {
		t.Fatalf("text cache: %+v, want one invalidation", st)
	}
}
