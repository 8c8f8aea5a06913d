package tokenizer

import (
	"encoding/base64"
	"encoding/binary"
	"testing"
)

// byteCharsmap writes a charsmap in SentencePiece's layout whose trie maps
// single bytes to replacements: the root's offset is 0, so byte c's unit
// is at c (label c, a leaf, offset 256), and its value unit at c^256.
func byteCharsmap(rules map[byte]string) string {
	units := make([]uint32, 512)
	var blob []byte
	for c, repl := range rules {
		units[c] = uint32(c) | 1<<8 | 256<<10
		units[int(c)^256] = uint32(len(blob))
		blob = append(append(blob, repl...), 0)
	}
	data := binary.LittleEndian.AppendUint32(nil, uint32(4*len(units)))
	for _, u := range units {
		data = binary.LittleEndian.AppendUint32(data, u)
	}
	return base64.StdEncoding.EncodeToString(append(data, blob...))
}

// TestPrecompiledByteRules runs a hand-made charsmap: mapped bytes are
// replaced (by nothing, by several characters), others kept, and a
// grapheme cluster under 6 bytes whose first character is mapped is
// replaced whole, combining marks included, as HF does.
func TestPrecompiledByteRules(t *testing.T) {
	cs := byteCharsmap(map[byte]string{'A': "a", 'B': "", '\t': " ", 'L': "ll"})
	n, err := precompiledNormalizer(normalizerJSON{PrecompiledCharsmap: &cs})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"xyz", "xyz"},
		{"ABC", "aC"},
		{"\tL\t", " ll "},
		{"A\u0301B", "a"}, // "A" + acute, one 3-byte cluster: replaced whole
		{"A\u0301\u0302\u0303", "a\u0301\u0302\u0303"}, // a 7-byte cluster: character by character
		{"é A", "é a"},
	} {
		if got := n(tc.in); got != tc.want {
			t.Errorf("normalize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
