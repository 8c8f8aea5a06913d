package tokenizer

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"fusion/engine/tokenizer/corpus"
	"fusion/internal/testenv"
)

func TestPieceCacheIsBounded(t *testing.T) {
	c := newPieceCache(1024)
	for i := range 100_000 {
		c.put(fmt.Sprint("piece", i), []int32{int32(i)})
	}
	if n, limit := c.len(), 2*c.shardLimit*cacheShards; n > limit {
		t.Errorf("cache holds %d entries, want at most %d", n, limit)
	}
	// Recent entries survive; a hit in the older generation keeps the
	// entry.
	if ids, ok := c.get("piece99999"); !ok || !slices.Equal(ids, []int32{99999}) {
		t.Errorf("get(piece99999) = %v, %v", ids, ok)
	}
	if _, ok := c.get("piece0"); ok {
		t.Error("get(piece0): an old entry survived 100000 newer ones")
	}
}

// TestConcurrentEncode encodes from several goroutines with a cache small
// enough to churn and wants the ids of a sequential run (run with -race).
func TestConcurrentEncode(t *testing.T) {
	tok, err := Load(testenv.TokenizerDir(t, "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	texts := corpus.Generate(9, 1500)
	want := make([][]int, len(texts))
	for i, s := range texts {
		want[i] = tok.Encode(s, false)
	}
	tok.model.(*bpeModel).cache = newPieceCache(64)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < len(texts); i += 3 {
				if got := tok.Encode(texts[i], false); !slices.Equal(got, want[i]) {
					errs <- fmt.Sprintf("goroutine %d: Encode(%q) = %v, want %v", w, texts[i], got, want[i])
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
