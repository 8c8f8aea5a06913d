package tokenizer

import "unicode"

// charClass is the set of Unicode properties of a rune that pre-tokenizer
// patterns test, as bits.
type charClass uint8

const (
	classLetter charClass = 1 << iota // \p{L}
	classNumber                       // \p{N}
	classMark                         // \p{M}
	classPunct                        // \p{P}
	classSymbol                       // \p{S}
	classSpace                        // \s: the Unicode White_Space property
)

// bmpClasses holds the class of every rune below U+10000; it is built once
// and only read afterwards.
var bmpClasses = buildBMPClasses()

func buildBMPClasses() *[0x10000]charClass {
	var table [0x10000]charClass
	tables := []struct {
		table *unicode.RangeTable
		class charClass
	}{
		{letterTable, classLetter},
		{numberTable, classNumber},
		{markTable, classMark},
		{punctTable, classPunct},
		{symbolTable, classSymbol},
		{unicode.White_Space, classSpace},
	}
	for _, t := range tables {
		for _, rng := range t.table.R16 {
			for r := int(rng.Lo); r <= int(rng.Hi); r += int(rng.Stride) {
				table[r] |= t.class
			}
		}
	}
	return &table
}

func slowClassOf(r rune) charClass {
	var c charClass
	switch {
	case unicode.Is(letterTable, r):
		c = classLetter
	case unicode.Is(numberTable, r):
		c = classNumber
	case unicode.Is(markTable, r):
		c = classMark
	case unicode.Is(punctTable, r):
		c = classPunct
	case unicode.Is(symbolTable, r):
		c = classSymbol
	}
	// White_Space has been stable for many Unicode versions, so Go's table
	// agrees with the reference; its members are all separators or controls.
	if unicode.Is(unicode.White_Space, r) {
		c |= classSpace
	}
	return c
}

// classOf returns the class of r; invalid runes (including utf8.RuneError
// standing for an invalid byte) have the class of U+FFFD, a symbol.
func classOf(r rune) charClass {
	if uint32(r) < 0x10000 {
		return bmpClasses[r]
	}
	if r > unicode.MaxRune {
		return 0
	}
	return slowClassOf(r)
}

// isWordChar reports whether r is a regex word character (\w in Unicode
// mode: alphabetic, mark, decimal number, connector punctuation or join
// control). It decides added tokens' single_word boundaries.
func isWordChar(r rune) bool {
	if r < 0x80 {
		return r == '_' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z')
	}
	c := classOf(r)
	return c&(classLetter|classMark) != 0 ||
		unicode.In(r, unicode.Nd, unicode.Nl, unicode.Pc, unicode.Other_Alphabetic, unicode.Join_Control)
}
