package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"fusion/engine"
	"fusion/engine/demo"
	"fusion/engine/prompt"
	"fusion/internal/testenv"
)

// newEmbedRunner serves the demo chat model "chat" and all-MiniLM-L6-v2
// as "minilm".
func newEmbedRunner(t *testing.T, cfg Config) *Runner {
	t.Helper()
	fixture := testenv.EmbeddingModelDir(t, "all-minilm-l6-v2")
	// A chat model of ~2 MB, more than the gap between MiniLM's files and
	// its loaded weights, so that evictions between the two are forced.
	o := demo.DefaultOptions()
	o.Intermediate, o.DType = 2048, "f32"
	r := newRunnerWith(t, cfg, map[string]demo.Options{"chat": o})
	if err := os.Symlink(fixture, filepath.Join(r.cfg.ModelsDir, "minilm")); err != nil {
		t.Fatal(err)
	}
	return r
}

func texts(s ...string) []engine.EmbedInput {
	out := make([]engine.EmbedInput, len(s))
	for i, x := range s {
		out[i] = engine.EmbedInput{Text: x}
	}
	return out
}

// TestEmbedPool: an embedding model and a chat model share the memory
// budget: each evicts the other when idle, a pinned one is kept (the
// other is refused), and a reloaded model gives the same vectors.
func TestEmbedPool(t *testing.T) {
	r := newEmbedRunner(t, Config{})
	ctx := context.Background()
	infos, err := r.Models(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, m := range infos {
		kinds[m.ID] = m.Kind
	}
	if kinds["chat"] != engine.KindChat || kinds["minilm"] != engine.KindEmbedding {
		t.Fatalf("kinds %v", kinds)
	}
	// Room for either model alone, not both.
	r.cfg.MemoryBudget = estimateBytes(r.models["minilm"].info.Path) + estimateBytes(r.models["chat"].info.Path)/4

	first, err := r.Embed(ctx, &engine.EmbedRequest{Model: "minilm", Inputs: texts("hello world")})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Vectors) != 1 || len(first.Vectors[0]) != 384 || first.PromptTokens != 4 {
		t.Fatalf("result: %d vectors, %d tokens", len(first.Vectors), first.PromptTokens)
	}
	if st := states(r)["minilm"]; st.State != StateIdle || st.Bytes <= 0 || st.KVBytes != 0 {
		t.Fatalf("minilm after embedding: %+v", st)
	}
	if got := generate(ctx, r, chat("chat", "Hello", 2)); got.err != nil {
		t.Fatal(got.err)
	}
	if st := states(r); st["minilm"].State != StateUnloaded || st["chat"].State != StateIdle {
		t.Fatalf("after generating: %+v", st)
	}
	again, err := r.Embed(ctx, &engine.EmbedRequest{Model: "minilm", Inputs: texts("hello world")})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again.Vectors[0], first.Vectors[0]) {
		t.Fatal("the reloaded model gives another vector")
	}
	if st := states(r); st["chat"].State != StateUnloaded {
		t.Fatalf("chat should have been evicted: %+v", st)
	}
	if err := r.Pin("minilm"); err != nil {
		t.Fatal(err)
	}
	if got := generate(ctx, r, chat("chat", "Hello", 2)); !errors.Is(got.err, ErrOverBudget) {
		t.Fatalf("chat beside a pinned minilm: %v, want ErrOverBudget", got.err)
	}
}

// TestEmbedRequests: token ids embed like their text, inputs past the
// limit are cut and listed (or refused with NoTruncate), a request larger
// than one encoder pass gives the vectors of one-by-one requests, and bad
// requests are InvalidRequestErrors naming the problem.
func TestEmbedRequests(t *testing.T) {
	r := newEmbedRunner(t, Config{MaxEmbedInputs: 24})
	ctx := context.Background()
	long := strings.Repeat("word ", 300)
	tok := func(s string) []int {
		res, err := r.Tokenize(ctx, "minilm", prompt.Request{Prompt: &s})
		if err != nil {
			t.Fatal(err)
		}
		return res.Tokens
	}
	ids := tok("hello world") // [CLS] hello world [SEP]
	ids = ids[1 : len(ids)-1]
	if len(ids) != 2 {
		t.Fatalf("tokens of hello world: %v", ids)
	}
	res, err := r.Embed(ctx, &engine.EmbedRequest{Model: "minilm", Inputs: []engine.EmbedInput{{Text: "hello world"}, {Tokens: ids}, {Text: long}}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Vectors[0], res.Vectors[1]) {
		t.Error("token ids and their text embed differently")
	}
	if !slices.Equal(res.Truncated, []int{2}) || res.PromptTokens != 4+4+256 {
		t.Errorf("truncated %v, tokens %d; want [2] and 264", res.Truncated, res.PromptTokens)
	}

	// 20 inputs of 256 tokens: more than one pass of 4,096 tokens.
	var many []engine.EmbedInput
	for i := range 20 {
		many = append(many, engine.EmbedInput{Text: strings.Repeat("word"+strings.Repeat("s", i%3)+" ", 300)})
	}
	big, err := r.Embed(ctx, &engine.EmbedRequest{Model: "minilm", Inputs: many})
	if err != nil {
		t.Fatal(err)
	}
	for i, in := range many[:3] {
		one, err := r.Embed(ctx, &engine.EmbedRequest{Model: "minilm", Inputs: []engine.EmbedInput{in}})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(one.Vectors[0], big.Vectors[i]) {
			t.Errorf("input %d: alone and in a large request the vectors differ", i)
		}
	}

	bad := []struct {
		name string
		req  engine.EmbedRequest
		want string
	}{
		{"no input", engine.EmbedRequest{Model: "minilm"}, "must not be empty"},
		{"empty string", engine.EmbedRequest{Model: "minilm", Inputs: texts("a", "")}, "input[1] is an empty string"},
		{"empty ids", engine.EmbedRequest{Model: "minilm", Inputs: []engine.EmbedInput{{Tokens: []int{}}}}, "empty list of tokens"},
		{"too many", engine.EmbedRequest{Model: "minilm", Inputs: make([]engine.EmbedInput, 25)}, "at most 24"},
		{"id outside vocabulary", engine.EmbedRequest{Model: "minilm", Inputs: []engine.EmbedInput{{Tokens: []int{30522}}}}, "vocabulary size 30522"},
		{"no truncation", engine.EmbedRequest{Model: "minilm", Inputs: texts(long), NoTruncate: true}, "longer than the model's 256 tokens"},
		{"dimensions", engine.EmbedRequest{Model: "minilm", Inputs: texts("a"), Dimensions: 64}, "does not support dimensions"},
		{"chat model", engine.EmbedRequest{Model: "chat", Inputs: texts("a")}, `"chat" is a chat model`},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := r.Embed(ctx, &c.req)
			var ie *prompt.InvalidRequestError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want an InvalidRequestError with %q", err, c.want)
			}
		})
	}
	if _, err := r.Generate(ctx, chat("minilm", "Hello", 2)); err == nil || !strings.Contains(err.Error(), "embedding model") {
		t.Fatalf("generation on minilm: %v", err)
	}
	if _, err := r.Embed(ctx, &engine.EmbedRequest{Model: "nope", Inputs: texts("a")}); !errors.Is(err, engine.ErrModelNotFound) {
		t.Fatalf("unknown model: %v", err)
	}
}

// TestEmbedBatching: the inputs of one request share one encoder pass,
// requests arriving while a pass runs share the next one (counted by
// EmbedStats), and every vector is bit-identical to its input embedded
// alone.
func TestEmbedBatching(t *testing.T) {
	r := newEmbedRunner(t, Config{EmbedBatchTokens: 192})
	ctx := context.Background()
	small := []string{"hello world", "a cat sat on the mat", "vector search engines", "der schnelle braune Fuchs",
		"😀 emoji and text", "how do I reset my password?", "the quick brown fox jumps over the lazy dog", "x"}
	alone := make([][]float32, len(small))
	for i, s := range small {
		res, err := r.Embed(ctx, &engine.EmbedRequest{Model: "minilm", Inputs: texts(s)})
		if err != nil {
			t.Fatal(err)
		}
		alone[i] = res.Vectors[0]
	}

	// One request of eight short inputs: one pass.
	before := r.EmbedStats()
	res, err := r.Embed(ctx, &engine.EmbedRequest{Model: "minilm", Inputs: texts(small...)})
	if err != nil {
		t.Fatal(err)
	}
	if d := r.EmbedStats().Passes - before.Passes; d != 1 {
		t.Errorf("eight short inputs of one request took %d passes, want 1", d)
	}
	for i := range small {
		if !slices.Equal(res.Vectors[i], alone[i]) {
			t.Errorf("input %d: batched in one request, the vector differs from alone", i)
		}
	}

	// A large request alone: 9 inputs of 64 tokens in passes of 192
	// padded tokens (3 inputs each).
	var big []engine.EmbedInput
	for i := range 9 {
		big = append(big, engine.EmbedInput{Text: strings.Repeat([]string{"alpha ", "beta ", "gamma "}[i%3], 62)})
	}
	before = r.EmbedStats()
	bigAlone, err := r.Embed(ctx, &engine.EmbedRequest{Model: "minilm", Inputs: big})
	if err != nil {
		t.Fatal(err)
	}
	bigPasses := r.EmbedStats().Passes - before.Passes
	if bigPasses != 3 {
		t.Fatalf("9 inputs of 64 tokens took %d passes of 192 tokens, want 3", bigPasses)
	}

	// The large request again, and while its first pass runs, eight
	// concurrent one-input requests: they wait together and share passes.
	before = r.EmbedStats()
	bigDone := make(chan *engine.EmbedResult, 1)
	go func() {
		res, err := r.Embed(ctx, &engine.EmbedRequest{Model: "minilm", Inputs: big})
		if err != nil {
			t.Error(err)
		}
		bigDone <- res
	}()
	for r.EmbedStats().Inputs == before.Inputs {
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	got := make([][]float32, len(small))
	for i, s := range small {
		wg.Go(func() {
			res, err := r.Embed(ctx, &engine.EmbedRequest{Model: "minilm", Inputs: texts(s)})
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = res.Vectors[0]
		})
	}
	wg.Wait()
	bigRes := <-bigDone
	after := r.EmbedStats()
	smallPasses := after.Passes - before.Passes - bigPasses
	t.Logf("8 concurrent requests behind a large one: %d passes for them", smallPasses)
	if smallPasses >= int64(len(small)) || smallPasses < 1 {
		t.Errorf("8 concurrent one-input requests took %d passes; they should share", smallPasses)
	}
	if in := after.Inputs - before.Inputs; in != int64(len(big)+len(small)) {
		t.Errorf("%d inputs counted, want %d", in, len(big)+len(small))
	}
	for i := range small {
		if !slices.Equal(got[i], alone[i]) {
			t.Errorf("input %d: batched with other requests, the vector differs from alone", i)
		}
	}
	for i := range big {
		if bigRes == nil || !slices.Equal(bigRes.Vectors[i], bigAlone.Vectors[i]) {
			t.Errorf("large request's input %d differs between runs", i)
		}
	}
}

// TestEmbedCancelQueued: a request whose context ends while it waits
// returns at once; the requests it was batched with still get their
// vectors.
func TestEmbedCancelQueued(t *testing.T) {
	r := newEmbedRunner(t, Config{EmbedBatchTokens: 192})
	var big []engine.EmbedInput
	for range 9 {
		big = append(big, engine.EmbedInput{Text: strings.Repeat("alpha ", 62)})
	}
	before := r.EmbedStats()
	bigDone := make(chan error, 1)
	go func() {
		_, err := r.Embed(context.Background(), &engine.EmbedRequest{Model: "minilm", Inputs: big})
		bigDone <- err
	}()
	for r.EmbedStats().Inputs == before.Inputs {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan error, 1)
	go func() {
		_, err := r.Embed(ctx, &engine.EmbedRequest{Model: "minilm", Inputs: texts("never mind")})
		cancelled <- err
	}()
	time.Sleep(10 * time.Millisecond)
	cancel()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: %v", err)
	}
	if err := <-bigDone; err != nil {
		t.Fatal(err)
	}
	if in := r.EmbedStats().Inputs - before.Inputs; in != int64(len(big)) {
		t.Errorf("%d inputs embedded, want the large request's %d (the cancelled one skipped)", in, len(big))
	}
}
