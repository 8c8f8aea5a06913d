package corpus

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
)

//go:embed testdata/xlmr_fixture.py
var xlmrScript string

// XLMRKey names the generated XLM-R fixtures: a hash of the script that
// builds them, so a changed script builds new ones.
func XLMRKey() string {
	sum := sha256.Sum256([]byte(xlmrScript))
	return hex.EncodeToString(sum[:6])
}

// XLMRTokenizer returns the directory of the XLM-R tokenizer fixture in
// cacheDir, building it first if needed (a SentencePiece unigram model
// trained on a generated multilingual corpus and converted by
// transformers; see testdata/xlmr_fixture.py): tokenizer.json and
// tokenizer_config.json as XLMRobertaTokenizer saves them, and
// converter/tokenizer.json as XLMRobertaConverter writes it. python must
// have sentencepiece and transformers.
func XLMRTokenizer(ctx context.Context, python, cacheDir string) (string, error) {
	dir := filepath.Join(cacheDir, "generated", "xlmr-"+XLMRKey(), "tokenizer")
	return dir, generate(ctx, dir, python, "tokenizer")
}

// XLMRModel returns the directory of the XLM-R embedding model fixture in
// cacheDir (a random-weight XLMRobertaModel in the sentence-transformers
// layout of multilingual-e5-small, with the XLMRTokenizer tokenizer),
// building both first if needed. python must also have torch.
func XLMRModel(ctx context.Context, python, cacheDir string) (string, error) {
	tok, err := XLMRTokenizer(ctx, python, cacheDir)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(filepath.Dir(tok), "model")
	return dir, generate(ctx, dir, python, "model", tok)
}

// XLMRReranker returns the directory of the XLM-R cross-encoder fixture
// in cacheDir (a random-weight one-label XLMRobertaForSequenceClassification,
// bge-reranker-v2-m3's architecture, as sentence-transformers' CrossEncoder
// saves it), building it first if needed. python must also have torch.
func XLMRReranker(ctx context.Context, python, cacheDir string) (string, error) {
	tok, err := XLMRTokenizer(ctx, python, cacheDir)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(filepath.Dir(tok), "reranker")
	return dir, generate(ctx, dir, python, "reranker", tok)
}

// generate runs the script into a temporary directory beside dir and
// renames it into place, so that concurrent test binaries never see a
// half-written fixture (the loser of a race drops its copy).
func generate(ctx context.Context, dir, python string, args ...string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	script := filepath.Join(tmp, "xlmr_fixture.py")
	if err := os.WriteFile(script, []byte(xlmrScript), 0o644); err != nil {
		return err
	}
	out := filepath.Join(tmp, "out")
	cmd := exec.CommandContext(ctx, python, append(append([]string{script, args[0]}, args[1:]...), out)...)
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "TOKENIZERS_PARALLELISM=false", "PYTHONHASHSEED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building the XLM-R %s fixture: %w: %s", args[0], err, bytes.TrimSpace(stderr.Bytes()))
	}
	if err := os.Rename(out, dir); err != nil {
		if _, statErr := os.Stat(dir); statErr == nil {
			return nil // built by another test binary meanwhile
		}
		return err
	}
	return nil
}
