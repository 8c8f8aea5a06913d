package tokenizer_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"

	"fusion/engine/tokenizer/corpus"
	"fusion/internal/testenv"
)

// TestO200kParityWithHarmony encodes the generated corpus with gpt-oss's
// tokenizer and with OpenAI's own o200k_harmony (the tiktoken inside
// openai-harmony, over the vocabulary rebuilt from the same tokenizer.json:
// testdata/o200k_reference.py), a second reference besides HF tokenizers,
// with special tokens in the text matched as special tokens.
func TestO200kParityWithHarmony(t *testing.T) {
	python := testenv.Python(t)
	if out, err := exec.Command(python, "-c", "import openai_harmony").CombinedOutput(); err != nil {
		t.Fatalf("openai-harmony is not installed in %s (scripts/requirements-test.txt): %s", python, out)
	}
	tok := loadFixture(t, "gptoss")
	texts := corpus.Generate(20260101, corpusSize/3) // HF already covers the whole corpus
	texts = append(texts, "<|start|>assistant<|channel|>final<|message|>Hi<|return|>", "a<|endoftext|>b", "<|constrain|>json")
	var in bytes.Buffer
	for _, s := range texts {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		in.Write(append(b, '\n'))
	}
	cmd := exec.Command(python, filepath.Join("testdata", "o200k_reference.py"), filepath.Join(testenv.TokenizerDir(t, "gptoss"), "tokenizer.json"))
	cmd.Stdin = &in
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("o200k reference: %v\n%s", err, stderr.String())
	}
	var want [][]int
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var ids []int
		if err := json.Unmarshal(sc.Bytes(), &ids); err != nil {
			t.Fatal(err)
		}
		want = append(want, ids)
	}
	if len(want) != len(texts) {
		t.Fatalf("reference returned %d encodings for %d texts", len(want), len(texts))
	}
	checkSameIDs(t, "o200k_harmony (tiktoken)", texts, encodeAll(tok, texts, false), want)
}
