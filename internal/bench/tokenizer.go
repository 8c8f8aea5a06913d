package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"fusion/engine/tokenizer"
	"fusion/engine/tokenizer/corpus"
)

// tokenizerBenchResult is the throughput of one tokenizer, ours and HF
// tokenizers' (single-threaded, measured in the same run), on one corpus.
type tokenizerBenchResult struct {
	CorpusBytes   int     `json:"corpus_bytes"`
	CorpusStrings int     `json:"corpus_strings"`
	FusionMBs     float64 `json:"fusion_mb_s,omitempty"`
	HFMBs         float64 `json:"hf_mb_s,omitempty"`
	Ratio         float64 `json:"ratio,omitempty"`
	FusionTokens  int     `json:"fusion_tokens,omitempty"`
	HFTokens      int     `json:"hf_tokens,omitempty"`
	Error         string  `json:"error,omitempty"`
}

// TokenizerOptions are the settings of the tokenizer benchmark.
type TokenizerOptions struct {
	Strings int    // corpus strings (about 176 bytes each)
	Seed    uint64 // corpus seed
	Repeat  int    // timed passes on each side; the fastest counts
}

// DefaultTokenizerOptions are the settings `make bench` uses.
func DefaultTokenizerOptions() TokenizerOptions {
	return TokenizerOptions{Strings: 24000, Seed: 20260101, Repeat: 3}
}

// Tokenizer encodes the generated test corpus with the Qwen3 and
// Llama 3.1 tokenizers, on one goroutine and with HF tokenizers on one
// thread, and prints the throughputs as one JSON object. The fixtures and
// the Python interpreter are found as the tests find them ($FUSION_FIXTURES,
// $FUSION_PYTHON, else under .cache); what is missing is reported in an
// "error" field.
func Tokenizer(ctx context.Context, o TokenizerOptions, stdout io.Writer) error {
	if o.Strings < 1 || o.Repeat < 1 {
		return optionErrorf("-strings and -repeat must be positive")
	}
	texts := corpus.Generate(o.Seed, o.Strings)
	out := map[string]tokenizerBenchResult{}
	for _, name := range []string{"qwen3", "llama3_1"} {
		out[name] = benchOneTokenizer(ctx, name, texts, o.Repeat)
	}
	enc := json.NewEncoder(stdout)
	return enc.Encode(out)
}

func benchOneTokenizer(ctx context.Context, name string, texts []string, repeat int) tokenizerBenchResult {
	res := tokenizerBenchResult{CorpusStrings: len(texts)}
	for _, s := range texts {
		res.CorpusBytes += len(s)
	}
	dir := filepath.Join(fixturesDir(), "tokenizers", name)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		res.Error = fmt.Sprintf("tokenizer fixture: %v (run `make test-deps`)", err)
		return res
	}
	seconds, tokens := timeEncode(tok, texts, repeat)
	res.FusionMBs = float64(res.CorpusBytes) / seconds / 1e6
	res.FusionTokens = tokens

	python := pythonPath()
	if _, err := os.Stat(python); err != nil {
		res.Error = fmt.Sprintf("reference python: %v (run `make test-deps`)", err)
		return res
	}
	ref := corpus.Reference{Python: python, TokenizerJSON: filepath.Join(dir, "tokenizer.json"), SingleThread: true}
	hf, err := ref.Bench(ctx, texts, repeat)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	if hf.Seconds <= 0 {
		res.Error = "the reference reported no time"
		return res
	}
	res.HFMBs = float64(res.CorpusBytes) / hf.Seconds / 1e6
	res.HFTokens = hf.Tokens
	res.Ratio = res.FusionMBs / res.HFMBs
	if res.HFTokens != res.FusionTokens {
		res.Error = fmt.Sprintf("token counts differ: fusion %d, hf %d", res.FusionTokens, res.HFTokens)
	}
	return res
}

// timeEncode encodes texts once to warm up (as the reference's cache warms
// up in its first pass), then repeat times, and returns the fastest pass.
func timeEncode(tok *tokenizer.Tokenizer, texts []string, repeat int) (seconds float64, tokens int) {
	for _, s := range texts {
		tok.Encode(s, false)
	}
	best := time.Duration(1<<63 - 1)
	for range repeat {
		runtime.GC()
		tokens = 0
		start := time.Now()
		for _, s := range texts {
			tokens += len(tok.Encode(s, false))
		}
		best = min(best, time.Since(start))
	}
	return best.Seconds(), tokens
}
