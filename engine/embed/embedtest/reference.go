package embedtest

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

//go:embed st_rerank.py
var rerankScript string

//go:embed st_embed.py
var embedScript string

// EmbedRef is sentence-transformers' encode on one text: the vector, and
// the token ids its tokenizer makes of the text (prompt included).
type EmbedRef struct {
	Vector []float64 `json:"vector"`
	IDs    []int     `json:"ids"`
}

// STReference runs sentence-transformers' encode from dir on the texts
// with python (with the model's prompt of that name unless promptName is
// "").
func STReference(t testing.TB, python, dir string, texts []string, promptName string) []EmbedRef {
	t.Helper()
	return runReference[string, EmbedRef](t, python, embedScript, texts, dir, promptName)
}

// RerankRef is sentence-transformers' CrossEncoder on one pair: the score
// predict gives, and the token ids and type ids its tokenizer makes of
// the pair, truncated as predict truncates it.
type RerankRef struct {
	Score  float64 `json:"score"`
	IDs    []int   `json:"ids"`
	Types  []int   `json:"types"`
	MaxLen int     `json:"max_len"`
}

// CrossEncoderReference runs sentence-transformers' CrossEncoder from dir
// on the [query, document] pairs with python.
func CrossEncoderReference(t testing.TB, python, dir string, pairs [][2]string) []RerankRef {
	t.Helper()
	return runReference[[2]string, RerankRef](t, python, rerankScript, pairs, dir)
}

// runReference runs a Python reference script with args, one JSON line
// in per item and one out.
func runReference[In, Out any](t testing.TB, python, source string, items []In, args ...string) []Out {
	t.Helper()
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	enc.SetEscapeHTML(false)
	for _, it := range items {
		if err := enc.Encode(it); err != nil {
			t.Fatal(err)
		}
	}
	script := filepath.Join(t.TempDir(), "reference.py")
	if err := os.WriteFile(script, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, append([]string{script}, args...)...)
	cmd.Stdin = &in
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "TOKENIZERS_PARALLELISM=false")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reference: %v\n%s", err, stderr.String())
	}
	var refs []Out
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var r Out
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		refs = append(refs, r)
	}
	if len(refs) != len(items) {
		t.Fatalf("reference gave %d answers for %d inputs", len(refs), len(items))
	}
	return refs
}
