package tokenizer

import (
	"encoding/json"
	"os/exec"
	"slices"
	"testing"
	"unicode"

	"fusion/internal/testenv"
)

// TestUnicodeTablesMatchHF compares, over every code point, the classes the
// pre-tokenizers use with those of HF tokenizers' regex engine.
func TestUnicodeTablesMatchHF(t *testing.T) {
	python := testenv.Python(t)
	out, err := exec.Command(python, "testdata/hf_char_classes.py").Output()
	if err != nil {
		t.Fatalf("testdata/hf_char_classes.py: %v", err)
	}
	var hf map[string][][2]rune
	if err := json.Unmarshal(out, &hf); err != nil {
		t.Fatal(err)
	}
	tables := map[string]*unicode.RangeTable{
		"L": letterTable, "M": markTable, "N": numberTable, "P": punctTable, "S": symbolTable, "s": unicode.White_Space,
	}
	for name, table := range tables {
		var ours [][2]rune
		for r := rune(0); r <= unicode.MaxRune; r++ {
			if r >= 0xD800 && r <= 0xDFFF || !unicode.Is(table, r) {
				continue
			}
			if n := len(ours); n > 0 && ours[n-1][1] == r-1 {
				ours[n-1][1] = r
			} else {
				ours = append(ours, [2]rune{r, r})
			}
		}
		if !slices.Equal(ours, hf[name]) {
			t.Errorf("class %s: our table (%d ranges) differs from HF tokenizers' (%d ranges)", name, len(ours), len(hf[name]))
		}
	}
	// classOf, which the scanners use, agrees with the tables.
	for r := rune(0); r <= unicode.MaxRune; r += 7 {
		want := slowClassOf(r)
		if got := classOf(r); got != want {
			t.Fatalf("classOf(U+%04X) = %b, want %b", r, got, want)
		}
	}
}
