package runner

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/demo"
	"fusion/engine/demo/demotest"
	"fusion/engine/prompt"
	"fusion/engine/sample"
)

// newDemoRunner writes a tiny demo model named "demo" (and its GGUF twin
// "demo-gguf") and starts a runner over them. The models are built once
// per test binary (demotest); every runner gets its own copy.
func newDemoRunner(t *testing.T, cfg Config) *Runner {
	t.Helper()
	dir := t.TempDir()
	demotest.Create(t, filepath.Join(dir, "demo"), demo.Options{Arch: "qwen3", Seed: 7})
	demotest.Create(t, filepath.Join(dir, "demo-gguf"), demo.Options{Arch: "qwen3", Seed: 7, Format: demo.FormatGGUF, DType: "f32"})
	cfg.ModelsDir = dir
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func chat(model, text string, maxTokens int) *engine.Request {
	p := sample.DefaultParams()
	p.Temperature = 0
	return &engine.Request{
		Model:     model,
		Messages:  []*chattemplate.Object{chattemplate.NewObject("role", "user", "content", text)},
		Sampling:  p,
		MaxTokens: maxTokens,
	}
}

// collect drains a generation: the concatenated text and the final event.
func collect(t *testing.T, ch <-chan engine.Event) (string, engine.Event, int) {
	t.Helper()
	var b strings.Builder
	n := 0
	for ev := range ch {
		b.WriteString(ev.Text)
		n += len(ev.Tokens)
		if ev.Done {
			if ev.Err != nil {
				t.Fatalf("generation failed: %v", ev.Err)
			}
			return b.String(), ev, n
		}
	}
	t.Fatal("stream closed without a final event")
	return "", engine.Event{}, 0
}

func TestGenerate(t *testing.T) {
	r := newDemoRunner(t, Config{})
	ctx := context.Background()

	ch, err := r.Generate(ctx, chat("demo", "Hello", 12))
	if err != nil {
		t.Fatal(err)
	}
	text, final, tokens := collect(t, ch)
	if final.FinishReason != engine.FinishLength || final.Usage.CompletionTokens != 12 || tokens != 12 {
		t.Fatalf("finish %q, usage %+v, %d tokens; want length after 12", final.FinishReason, final.Usage, tokens)
	}
	if final.Usage.PromptTokens == 0 || text == "" {
		t.Fatalf("usage %+v, text %q", final.Usage, text)
	}

	// Greedy decoding is deterministic, and the GGUF twin (f32, same
	// weights) produces the same text.
	for _, model := range []string{"demo", "demo-gguf"} {
		ch, err := r.Generate(ctx, chat(model, "Hello", 12))
		if err != nil {
			t.Fatal(err)
		}
		if again, _, _ := collect(t, ch); again != text {
			t.Errorf("%s: greedy text %q, first run %q", model, again, text)
		}
	}

	// A stop sequence taken from the greedy text cuts it there.
	if len(text) <= 4 {
		t.Fatalf("greedy text %q: too short to take a stop sequence from", text)
	}
	stop := text[2:4]
	req := chat("demo", "Hello", 12)
	req.Stop = []string{stop}
	ch, err = r.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got, final, _ := collect(t, ch)
	want := text[:strings.Index(text, stop)]
	if got != want || final.FinishReason != engine.FinishStop || final.StopSequence != stop {
		t.Errorf("stop %q: text %q finish %q %q; want %q", stop, got, final.FinishReason, final.StopSequence, want)
	}

	// Same seed, same sampled text.
	seeded := func() string {
		req := chat("demo", "Hello", 16)
		seed := int64(42)
		req.Sampling.Temperature, req.Sampling.Seed = 1.5, &seed
		ch, err := r.Generate(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		s, _, _ := collect(t, ch)
		return s
	}
	if a, b := seeded(), seeded(); a != b {
		t.Errorf("same seed gave %q and %q", a, b)
	}
	if st := r.Stats(); st.InFlight != 0 || st.WeightBytes == 0 {
		t.Errorf("stats after runs: %+v", st)
	}
}

func TestGenerateErrors(t *testing.T) {
	r := newDemoRunner(t, Config{MaxTokens: 100})
	ctx := context.Background()
	var ire *prompt.InvalidRequestError

	if _, err := r.Generate(ctx, chat("nope", "hi", 1)); !errors.Is(err, engine.ErrModelNotFound) {
		t.Errorf("unknown model: %v", err)
	}
	if _, err := r.Generate(ctx, chat("demo", "hi", 101)); !errors.As(err, &ire) {
		t.Errorf("max_tokens over the cap: %v", err)
	}
	bad := chat("demo", "hi", 1)
	bad.Sampling.TopP = 2
	if _, err := r.Generate(ctx, bad); !errors.As(err, &ire) || !strings.Contains(err.Error(), "top_p") {
		t.Errorf("bad top_p: %v", err)
	}
	long := chat("demo", strings.Repeat("word ", 50000), 1)
	if _, err := r.Generate(ctx, long); !errors.As(err, &ire) || !strings.Contains(err.Error(), "context") {
		t.Errorf("prompt over the context: %v", err)
	}
}

func TestCancelAndOverload(t *testing.T) {
	r := newDemoRunner(t, Config{MaxQueued: 1})
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := r.Generate(ctx, chat("demo", "Hello", 4000))
	if err != nil {
		t.Fatal(err)
	}
	<-ch // first token is out: the generation is running
	if _, err := r.Generate(context.Background(), chat("demo", "Hello", 1)); !errors.Is(err, engine.ErrOverloaded) {
		t.Errorf("second request at MaxQueued 1: %v, want ErrOverloaded", err)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for r.Stats().InFlight != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if st := r.Stats(); st.InFlight != 0 || st.Cancelled != 1 {
		t.Fatalf("after cancel: %+v, want nothing in flight and 1 cancelled", st)
	}
	for range ch { // the channel is closed
	}
	if _, err := r.Generate(context.Background(), chat("demo", "Hello", 1)); err != nil {
		t.Errorf("after cancel the slot is free: %v", err)
	}
}

func TestModelsAndTokenize(t *testing.T) {
	r := newDemoRunner(t, Config{})
	ms, err := r.Models(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].ID != "demo" || ms[1].ID != "demo-gguf" || ms[1].Format != "gguf" || ms[0].Loaded {
		t.Fatalf("models %+v", ms)
	}
	res, err := r.Tokenize(context.Background(), "demo", prompt.Request{Prompt: ptr("Hello")})
	if err != nil || res.Count == 0 {
		t.Fatalf("tokenize: %+v, %v", res, err)
	}
	text, err := r.Detokenize(context.Background(), "demo-gguf", res.Tokens)
	if err != nil || text != "Hello" {
		t.Fatalf("detokenize: %q, %v", text, err)
	}
	if _, err := r.Tokenize(context.Background(), "nope", prompt.Request{Prompt: ptr("x")}); !errors.Is(err, engine.ErrModelNotFound) {
		t.Errorf("tokenize unknown model: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestStopSequenceCompletedByFlush: an answer cut by max_tokens inside a
// UTF-8 character ends with U+FFFD; a stop sequence that this last
// character completes cuts the answer there and ends it as stopped by that
// sequence, as the same stop one token earlier would (it used to cut the
// text but report "length" and no stop sequence).
func TestStopSequenceCompletedByFlush(t *testing.T) {
	r := newDemoRunner(t, Config{})
	ctx := context.Background()
	for n := 1; n <= 64; n++ {
		ch, err := r.Generate(ctx, chat("demo", "Hello", n))
		if err != nil {
			t.Fatal(err)
		}
		text, final, _ := collect(t, ch)
		runes := []rune(text)
		if final.FinishReason != engine.FinishLength || len(runes) < 3 || runes[len(runes)-1] != utf8.RuneError {
			continue
		}
		stop := string(runes[len(runes)-3:])
		req := chat("demo", "Hello", n)
		req.Stop = []string{stop}
		if ch, err = r.Generate(ctx, req); err != nil {
			t.Fatal(err)
		}
		got, final, _ := collect(t, ch)
		if want := text[:strings.Index(text, stop)]; got != want || final.FinishReason != engine.FinishStop || final.StopSequence != stop {
			t.Errorf("max_tokens %d, stop %q: text %q, finish %q, stop sequence %q; want %q, stop, %q",
				n, stop, got, final.FinishReason, final.StopSequence, want, stop)
		}
		return
	}
	t.Fatal("no greedy answer of 1..64 tokens ends inside a character")
}
