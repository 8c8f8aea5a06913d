package corpus

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
)

//go:embed testdata/hf_tokenizers.py
var referenceScript string

// Reference runs HF tokenizers (the Python package) on a tokenizer.json, as
// the oracle the Go tokenizer is compared with.
type Reference struct {
	Python        string // an interpreter with tokenizers installed
	TokenizerJSON string // path of the tokenizer.json file
	// SingleThread makes HF encode on one thread, for benchmarks.
	SingleThread bool
}

// Encode returns the ids of every text.
func (r Reference) Encode(ctx context.Context, texts []string, addSpecial bool) ([][]int, error) {
	out, err := runScript(ctx, r, "encode", flag(addSpecial), texts)
	if err != nil {
		return nil, err
	}
	return decodeLines[[]int](out, len(texts))
}

// Decode returns the text of every id list.
func (r Reference) Decode(ctx context.Context, ids [][]int, skipSpecial bool) ([]string, error) {
	out, err := runScript(ctx, r, "decode", flag(skipSpecial), ids)
	if err != nil {
		return nil, err
	}
	return decodeLines[string](out, len(ids))
}

// BenchResult is the best time of the reference's encode loop over a
// corpus.
type BenchResult struct {
	Seconds float64 `json:"seconds"`
	Tokens  int     `json:"tokens"`
}

// Bench times encoding all texts (without special tokens) repeat times
// inside Python and returns the best run.
func (r Reference) Bench(ctx context.Context, texts []string, repeat int) (BenchResult, error) {
	var res BenchResult
	out, err := runScript(ctx, r, "bench", strconv.Itoa(repeat), texts)
	if err != nil {
		return res, err
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return res, fmt.Errorf("reading the reference benchmark output: %w", err)
	}
	return res, nil
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// runScript feeds items as JSON lines to the script and returns its output.
func runScript[T any](ctx context.Context, r Reference, mode, arg string, items []T) ([]byte, error) {
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	enc.SetEscapeHTML(false)
	for _, item := range items {
		if err := enc.Encode(item); err != nil {
			return nil, err
		}
	}
	cmd := exec.CommandContext(ctx, r.Python, "-c", referenceScript, mode, r.TokenizerJSON, arg)
	cmd.Stdin = &in
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = os.Environ()
	if r.SingleThread {
		cmd.Env = append(cmd.Env, "RAYON_NUM_THREADS=1", "TOKENIZERS_PARALLELISM=false")
	}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("reference tokenizer (%s %s): %w: %s", r.Python, mode, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// decodeLines reads want JSON lines of type T.
func decodeLines[T any](out []byte, want int) ([]T, error) {
	lines := bytes.Split(bytes.TrimSuffix(out, []byte("\n")), []byte("\n"))
	if want == 0 {
		return nil, nil
	}
	if len(lines) != want {
		return nil, fmt.Errorf("reference returned %d lines for %d inputs", len(lines), want)
	}
	res := make([]T, len(lines))
	for i, line := range lines {
		if err := json.Unmarshal(line, &res[i]); err != nil {
			return nil, fmt.Errorf("reference output line %d: %w", i+1, err)
		}
	}
	return res, nil
}
