package tokenizer_test

import (
	"slices"
	"strings"
	"testing"

	"fusion/engine/tokenizer"
)

// bpeDoc has a few merges over the byte tokens: ab=256, bc=257, abc=258,
// abcd=259, aa=260, aaaa=261.
func bpeDoc(merges any, ignoreMerges bool) tinyDoc {
	return tinyDoc{
		Extra:        []string{"ab", "bc", "abc", "abcd", "aa", "aaaa"},
		Merges:       merges,
		IgnoreMerges: ignoreMerges,
	}
}

var (
	mergeStrings = []string{"a b", "b c", "ab c", "a a", "aa aa"}
	mergePairs   = [][2]string{{"a", "b"}, {"b", "c"}, {"ab", "c"}, {"a", "a"}, {"aa", "aa"}}
)

// The expected ids are those of HF tokenizers on the same documents.
func TestBPEMerges(t *testing.T) {
	tests := []struct {
		text         string
		want         []int
		ignoreMerges []int // with ignore_merges, if different
	}{
		{"abc", []int{258}, nil},
		{"abcd", []int{258, 100}, []int{259}},
		{"aaaaa", []int{261, 97}, nil},
		{"aaa", []int{260, 97}, nil},
		{"bca", []int{257, 97}, nil},
		{"cab", []int{99, 256}, nil},
		{"abab abcd", []int{256, 256, 32, 258, 100}, []int{256, 256, 32, 258, 100}},
		{"", nil, nil},
	}
	for _, format := range []struct {
		name   string
		merges any
	}{{"strings", mergeStrings}, {"pairs", mergePairs}} {
		for _, ignore := range []bool{false, true} {
			tok := bpeDoc(format.merges, ignore).build(t)
			for _, tt := range tests {
				want := tt.want
				if ignore && tt.ignoreMerges != nil {
					want = tt.ignoreMerges
				}
				if got := tok.Encode(tt.text, false); !slices.Equal(got, want) {
					t.Errorf("merges as %s, ignore_merges=%v: Encode(%q) = %v, want %v", format.name, ignore, tt.text, got, want)
				}
			}
		}
	}
}

func TestBPEMergeErrors(t *testing.T) {
	tests := []struct {
		merges any
		want   string
	}{
		{[]string{"a b", "a q9"}, `merges[1]: "q9" is not in the vocabulary`},
		{[]string{"a b c"}, `merges[0]: "a b c" is not two tokens`},
		{[]string{"ab"}, `merges[0]: "ab" is not two tokens`},
		{[]string{"c d"}, `merges[0]: merged token "cd" is not in the vocabulary`},
		{[][]string{{"a", "b", "c"}}, "merges[0]: want 2 tokens, have 3"},
		{map[string]int{"a": 1}, "merges: not a list"},
	}
	for _, tt := range tests {
		_, err := tokenizer.FromJSON(bpeDoc(tt.merges, false).json(t))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("merges %v: error %v, want one containing %q", tt.merges, err, tt.want)
		}
	}
}
