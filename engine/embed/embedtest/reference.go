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
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	enc.SetEscapeHTML(false)
	for _, p := range pairs {
		if err := enc.Encode(p); err != nil {
			t.Fatal(err)
		}
	}
	script := filepath.Join(t.TempDir(), "st_rerank.py")
	if err := os.WriteFile(script, []byte(rerankScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, script, dir)
	cmd.Stdin = &in
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "TOKENIZERS_PARALLELISM=false")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("CrossEncoder: %v\n%s", err, stderr.String())
	}
	var refs []RerankRef
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var r RerankRef
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		refs = append(refs, r)
	}
	if len(refs) != len(pairs) {
		t.Fatalf("CrossEncoder gave %d scores for %d pairs", len(refs), len(pairs))
	}
	return refs
}
