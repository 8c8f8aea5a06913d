package tokenizer

// byteLevelAlphabet maps every byte to the printable rune that stands for it
// in byte-level vocabularies (GPT-2's bytes_to_unicode): the printable
// Latin-1 bytes map to themselves, the other 68 bytes to U+0100 onwards in
// byte order (space becomes 'Ġ', newline 'Ċ').
var byteLevelAlphabet = buildByteLevelAlphabet()

// byteLevelBytes is the inverse of byteLevelAlphabet, indexed by rune; -1
// marks runes outside the alphabet.
var byteLevelBytes = buildByteLevelBytes()

func buildByteLevelAlphabet() [256]rune {
	var table [256]rune
	next := rune(256)
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			table[b] = rune(b)
			continue
		}
		table[b] = next
		next++
	}
	return table
}

func buildByteLevelBytes() [324]int16 {
	var inverse [324]int16
	for i := range inverse {
		inverse[i] = -1
	}
	for b, r := range byteLevelAlphabet {
		inverse[r] = int16(b)
	}
	return inverse
}

// byteLevelDecode returns the bytes a byte-level token string stands for,
// and false if the string has a rune outside the alphabet.
func byteLevelDecode(token string) ([]byte, bool) {
	out := make([]byte, 0, len(token))
	for _, r := range token {
		if r < 0 || int(r) >= len(byteLevelBytes) || byteLevelBytes[r] < 0 {
			return nil, false
		}
		out = append(out, byte(byteLevelBytes[r]))
	}
	return out, true
}
