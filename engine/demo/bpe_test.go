package demo

import (
	"slices"
	"testing"
)

func TestByteAlphabet(t *testing.T) {
	table, order := byteAlphabet()
	if table[' '] != 'Ġ' || table['\n'] != 'Ċ' || table['a'] != 'a' || table[0] != 'Ā' || table[173] != 'Ń' {
		t.Errorf("table: space %q newline %q a %q 0 %q 173 %q", table[' '], table['\n'], table['a'], table[0], table[173])
	}
	if order[0] != '!' || order[93] != '~' || order[188] != 0 || len(order) != 256 {
		t.Errorf("order starts %v, byte 0 at %d", order[:3], slices.Index(order, 0))
	}
	seen := map[rune]bool{}
	for _, r := range table {
		if seen[r] {
			t.Fatalf("rune %q used twice", r)
		}
		seen[r] = true
	}
}

func TestPretokenize(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"Hello, world!", []string{"Hello", ",", " world", "!"}},
		{"in 2024 it's", []string{"in", " ", "2", "0", "2", "4", " it", "'s"}},
		{"a  b\n\n  c", []string{"a", " ", " b", "\n\n", " ", " c"}},
		{"x = (y)\n", []string{"x", " =", " (", "y", ")\n"}},
		{"end   ", []string{"end", "   "}},
	}
	for _, tc := range tests {
		if got := pretokenize(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("pretokenize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestTrainBPE(t *testing.T) {
	merges := trainBPE(corpus, 1000)
	if len(merges) < 300 {
		t.Errorf("only %d merges learned", len(merges))
	}
	if want := [][2]string{{"Ġ", "a"}, {"Ġ", "Ġ"}, {"Ġ", "t"}, {"h", "e"}, {"i", "n"}}; !slices.Equal(merges[:5], want) {
		t.Errorf("first merges %q, want %q", merges[:5], want)
	}
	t.Logf("%d merges", len(merges))
	if again := trainBPE(corpus, 1000); !slices.Equal(again, merges) {
		t.Error("training is not deterministic")
	}
	// Every merge joins tokens that exist by then.
	known := map[string]bool{}
	table, _ := byteAlphabet()
	for _, r := range table {
		known[string(r)] = true
	}
	for i, m := range merges {
		if !known[m[0]] || !known[m[1]] {
			t.Fatalf("merge %d %q uses an unknown token", i, m)
		}
		known[m[0]+m[1]] = true
	}
}
