package quant

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"os"

	"fusion/engine/backend/cpu"
	"fusion/engine/model"
	"fusion/engine/prompt"
	"fusion/engine/tokenizer"
)

// MaxPerplexityTokens bounds the text Perplexity scores.
const MaxPerplexityTokens = 8192

// Score is a model's perplexity on a text.
type Score struct {
	Tokens     int     `json:"tokens"` // tokens predicted (the text's minus the first)
	NLL        float64 `json:"nll"`    // mean negative log-likelihood, nats per token
	Perplexity float64 `json:"perplexity"`
}

// Perplexity loads the model in dir (a model directory or a GGUF file,
// whose embedded tokenizer is then used) on the CPU backend and scores text:
// the mean negative log-likelihood of each token given those before it,
// in windows of window tokens (default and at most the text, up to
// MaxPerplexityTokens), each window starting fresh.
func Perplexity(ctx context.Context, dir, text string, window int) (Score, error) {
	tok, err := loadTokenizer(dir)
	if err != nil {
		return Score{}, fmt.Errorf("quant: tokenizer: %w", err)
	}
	ids := tok.Encode(text, true)
	if len(ids) > MaxPerplexityTokens {
		ids = ids[:MaxPerplexityTokens]
	}
	if len(ids) < 2 {
		return Score{}, fmt.Errorf("%w: the text has %d tokens, perplexity needs 2", ErrBadOptions, len(ids))
	}
	var sum float64
	n := 0
	err = forwardRows(ctx, dir, ids, window, func(row []float32, target int) {
		sum += nll(row, target)
		n++
	})
	if err != nil {
		return Score{}, err
	}
	mean := sum / float64(n)
	return Score{Tokens: n, NLL: mean, Perplexity: math.Exp(mean)}, nil
}

// forwardRows loads the model at path on the CPU backend and runs ids
// through it in windows of window tokens (0 or more than ids: one),
// each window starting fresh; fn gets the logits of every position that
// has a next token in its window, with that token.
func forwardRows(ctx context.Context, path string, ids []int, window int, fn func(row []float32, target int)) error {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	m, err := model.Load(ctx, path, be, model.Options{Mmap: true})
	if err != nil {
		return fmt.Errorf("quant: %w", err)
	}
	defer m.Close()
	if window <= 1 || window > len(ids) {
		window = len(ids)
	}
	vocab := m.Config.VocabSize
	for start := 0; start+1 < len(ids); start += window {
		chunk := ids[start:min(start+window, len(ids))]
		if len(chunk) < 2 {
			break
		}
		seq, err := m.NewSequence(len(chunk))
		if err != nil {
			return fmt.Errorf("quant: %w", err)
		}
		out, err := m.Forward(ctx, []model.Input{{Seq: seq, Tokens: chunk, AllLogits: true}}, model.Range{}, nil)
		seq.Close()
		if err != nil {
			return fmt.Errorf("quant: %w", err)
		}
		logits := out.Logits[0]
		for i := 0; i+1 < len(chunk); i++ {
			fn(logits[i*vocab:(i+1)*vocab], chunk[i+1])
		}
	}
	return nil
}

// loadTokenizer loads the tokenizer of a model directory or, as the
// engine does, of a GGUF file.
func loadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	if st, err := os.Stat(path); err != nil || st.IsDir() {
		return tokenizer.Load(path)
	}
	b, err := prompt.Load(path)
	if err != nil {
		return nil, err
	}
	return b.Tokenizer(), nil
}

// nll is −log softmax(row)[target], in float64.
func nll(row []float32, target int) float64 {
	return logSumExp(row) - float64(row[target])
}

// logSumExp is log Σ exp(row), in float64.
func logSumExp(row []float32) float64 {
	mx := math.Inf(-1)
	for _, v := range row {
		mx = math.Max(mx, float64(v))
	}
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v) - mx)
	}
	return math.Log(s) + mx
}

// EvalText is a short English text bundled for perplexity checks (a
// held-out text: no demo or fixture model was built from it).
//
//go:embed eval.txt
var EvalText string
