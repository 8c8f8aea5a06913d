package gguf

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"fusion/engine/tokenizer"
	"fusion/engine/tokenizer/corpus"
	"fusion/internal/race"
	"fusion/internal/testenv"
)

// gemma4CorpusSize is how many generated strings the tokenizer built from
// Gemma 4's GGUF vocabulary is compared with HF tokenizers on (its
// pipeline is Gemma 3's, which the tokenizer package's parity suite runs
// on 24000 strings).
const gemma4CorpusSize = 2000

// TestTokenizerGemma4 builds tokenizer.json from Gemma 4's real vocabulary
// (the vocab-only GGUF of llama.cpp's source) and checks the tokenizer it
// makes: on llama.cpp's test strings it must give the ids google's
// tokenizer gave through HF tokenizers (the .out file next to it), and on
// the generated corpus the same ids as HF tokenizers loading the same
// tokenizer.json (one Python process: loading it takes seconds), with the
// BOS in front when asked, decoding back to the text. Under -race the
// 262,144-token vocabulary's conversion and build take ~45 s in the race
// detector, so the race pass skips it and make test runs it without.
func TestTokenizerGemma4(t *testing.T) {
	if race.Enabled {
		t.Skip("slow under -race; make test runs it without -race")
	}
	start := time.Now()
	dir := testenv.TokenizerFileDir(t, "gemma4", "vocab.gguf")
	f, err := Open(filepath.Join(dir, "vocab.gguf"), LoadRead)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := f.TokenizerJSON()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("GGUF to tokenizer: %v", time.Since(start).Round(time.Millisecond))
	if f.ChatTemplate() == "" || !strings.Contains(f.ChatTemplate(), "<|tool_call>") {
		t.Error("the GGUF's chat template is not Gemma 4's")
	}

	// llama.cpp's test strings and the ids HF gave for them.
	inp, err := os.ReadFile(filepath.Join(dir, "vocab.gguf.inp"))
	if err != nil {
		t.Fatal(err)
	}
	outp, err := os.ReadFile(filepath.Join(dir, "vocab.gguf.out"))
	if err != nil {
		t.Fatal(err)
	}
	texts := strings.Split(string(inp), "\n__ggml_vocab_test__\n")
	lines := strings.Split(strings.TrimSuffix(string(outp), "\n"), "\n")
	if len(texts) != len(lines) || len(texts) < 40 {
		t.Fatalf("%d test strings, %d id lines", len(texts), len(lines))
	}
	for i, text := range texts {
		var want []int
		for _, field := range strings.Fields(lines[i]) {
			id, err := strconv.Atoi(field)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, id)
		}
		if got := tok.Encode(text, false); !slices.Equal(got, want) {
			t.Errorf("%q: %v, HF gave %v", text, got, want)
		}
	}
	t.Logf("%d llama.cpp test strings identical to HF's ids", len(texts))

	// The generated corpus against HF tokenizers on the same document.
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(path, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	ref := corpus.Reference{Python: testenv.Python(t), TokenizerJSON: path}
	all := corpus.Generate(20260101, gemma4CorpusSize)
	all = append(all, "<|turn>user\nhi<turn|>\n<|turn>model\n<|channel>thought\n<channel|><|tool_call>call:f{a:<|\"|>x<|\"|>}<tool_call|><|tool_response>")
	start = time.Now()
	want, err := ref.Encode(context.Background(), all, false)
	t.Logf("HF tokenizers: %v", time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for i, text := range all {
		got := tok.Encode(text, false)
		withBOS := tok.Encode(text, true)
		switch {
		case !slices.Equal(got, want[i]):
			t.Errorf("%q: %v, HF %v", text, got, want[i])
		case !slices.Equal(withBOS, append([]int{2}, got...)):
			t.Errorf("%q with BOS: %v", text, withBOS)
		case tok.Decode(got, false) != text && !strings.Contains(text, "▁"): // "▁" decodes to a space, as in HF
			t.Errorf("%q decodes to %q", text, tok.Decode(got, false))
		default:
			continue
		}
		if bad++; bad >= 3 {
			t.FailNow()
		}
	}
	t.Logf("%d corpus strings identical to HF tokenizers", len(all))
	if fmt.Sprint(tok.Encode("<|channel>", false)) != "[100]" {
		t.Errorf("<|channel> is not one token: %v", tok.Encode("<|channel>", false))
	}
}
