// Package corpus generates the deterministic text corpus the tokenizer is
// tested and benchmarked on, and runs the reference implementation (HF
// tokenizers, in Python) over it.
//
// The corpus aims at what breaks tokenizers: many scripts, emoji sequences,
// combining marks (NFC), source code, runs of white space, long numbers,
// contractions in odd case, added tokens written inside text, and random
// code points, including astral and unassigned ones.
package corpus

import (
	"math/rand/v2"
	"strings"
	"unicode/utf8"
)

// Generate returns n strings, always the same for the same seed.
func Generate(seed uint64, n int) []string {
	g := &generator{rng: rand.New(rand.NewPCG(seed, seed^0x5eed_c0ffee))}
	out := make([]string, n)
	for i := range out {
		out[i] = g.text()
	}
	return out
}

// AddedTokens are the added tokens of the Qwen3, Llama 3, DeepSeek V3,
// Gemma 3 and Llama 2 tokenizers that the corpus writes inside text (each tokenizer sees the
// others' as plain text), with near misses.
var AddedTokens = []string{
	"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
	"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
	"<|fim_prefix|>", "<|vision_start|>", "<|begin_of_text|>", "<|end_of_text|>",
	"<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|python_tag|>",
	"<|reserved_special_token_7|>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
	"<｜User｜>", "<｜Assistant｜>", "<｜tool▁call▁begin｜>", "<｜fim▁hole｜>",
	// Gemma 3 and Llama 2 (SentencePiece): their specials, the space
	// marker and byte tokens written as text
	"<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<bos>", "<eos>", "<s>", "</s>", "<unk>",
	"▁", "▁▁the", "<0x41>", "<0xE2>",
	// near misses
	"<|im_end", "<|im_end|", "<think", "</think", "<|begin_of_text", "<<|im_end|>>", "<|IM_END|>",
	"< think>", "<｜User", "<|eot_id|>>",
}

type generator struct {
	rng *rand.Rand
}

func (g *generator) intn(n int) int { return g.rng.IntN(n) }

func (g *generator) pick(list []string) string { return list[g.intn(len(list))] }

// text returns one corpus string: one fragment, or a few joined.
func (g *generator) text() string {
	parts := 1
	if g.intn(3) == 0 {
		parts = 2 + g.intn(3)
	}
	var b strings.Builder
	for i := range parts {
		if i > 0 {
			b.WriteString(g.pick([]string{"", " ", "  ", "\n", "\t", ", ", "\r\n", " \n"}))
		}
		b.WriteString(g.fragment())
	}
	return b.String()
}

func (g *generator) fragment() string {
	kinds := []func() string{
		g.prose, g.prose, g.prose,
		g.scriptWords, g.scriptWords,
		g.emoji,
		g.combining,
		g.code, g.code,
		g.whitespace,
		g.numbers,
		g.contractions,
		g.withAddedTokens, g.withAddedTokens,
		g.randomCodePoints, g.randomCodePoints,
		g.long,
	}
	return kinds[g.intn(len(kinds))]()
}

// words of a few languages, written for this corpus.
var languages = [][]string{
	{"the", "quick", "model", "reads", "every", "token", "while", "servers", "answer", "questions", "about", "weather", "and", "tomorrow", "people", "don't", "it's", "we're", "they'll", "Hello", "world", "OpenAI", "JSON", "HTTP/2"},
	{"Die", "Straße", "ist", "heute", "sehr", "ruhig", "Übermorgen", "fahren", "wir", "nach", "München", "Größe", "schön", "Brötchen"},
	{"L'été", "dernier", "nous", "sommes", "allés", "à", "la", "mer", "c'était", "très", "agréable", "où", "déjà", "façade", "cœur"},
	{"El", "niño", "comió", "una", "manzana", "mañana", "¿Dónde", "está", "la", "estación?", "¡Qué", "bien!", "corazón", "pingüino"},
	{"Привет", "мир", "сегодня", "хорошая", "погода", "Москва", "объявление", "съёмка", "ещё", "ЗАГЛАВНЫЕ", "буквы"},
	{"今天", "天气", "很好", "我们", "一起", "去", "公园", "散步", "吧", "机器学习", "模型", "推理", "服务器", "。", "，", "「引用」"},
	{"こんにちは", "世界", "東京", "ラーメン", "を", "食べ", "ました", "カタカナ", "ひらがな", "です", "。"},
	{"안녕하세요", "세계", "오늘", "날씨가", "좋네요", "한국어", "토크나이저", "테스트"},
	{"مرحبا", "بالعالم", "اليوم", "الطقس", "جميل", "السَّلَامُ", "عَلَيْكُمْ", "كتاب", "١٢٣"},
	{"नमस्ते", "दुनिया", "आज", "मौसम", "अच्छा", "है", "हिन्दी", "क्षत्रिय", "ज्ञान", "१२३"},
	{"สวัสดี", "ชาวโลก", "วันนี้", "อากาศ", "ดี", "มาก", "ภาษาไทย", "กรุงเทพฯ", "๑๒๓"},
	{"Γειά", "σου", "κόσμε", "σήμερα", "ο", "καιρός", "είναι", "ωραίος", "ΑΘΗΝΑ"},
	{"שלום", "עולם", "היום", "מזג", "האוויר", "נעים", "עִבְרִית"},
	{"Xin", "chào", "thế", "giới", "Hôm", "nay", "trời", "đẹp", "quá", "Việt", "Nam", "người", "nghiêng"},
	{"Merhaba", "dünya", "bugün", "hava", "çok", "güzel", "İstanbul", "ılık", "ŞEHİR"},
	{"Բարեւ", "աշխարհ", "ሰላም", "ዓለም", "გამარჯობა", "მსოფლიო", "வணக்கம்", "உலகம்", "ಕನ್ನಡ", "తెలుగు"},
}

func (g *generator) prose() string {
	words := languages[g.intn(len(languages))]
	var b strings.Builder
	n := 3 + g.intn(14)
	for i := range n {
		if i > 0 {
			b.WriteString(g.pick([]string{" ", " ", " ", " ", ", ", "  ", " - ", "\u00a0", "\u3000", "、"}))
		}
		w := g.pick(words)
		switch g.intn(12) {
		case 0:
			w = strings.ToUpper(w)
		case 1:
			w = "\"" + w + "\""
		case 2:
			w = "(" + w + ")"
		}
		b.WriteString(w)
	}
	b.WriteString(g.pick([]string{".", "!", "?", "...", "", "。", "؟", "।", ":\n"}))
	return b.String()
}

// scripts are code point ranges of letters (and marks) of several scripts.
var scripts = [][2]rune{
	{0x4E00, 0x9FFF},   // CJK
	{0x3400, 0x4DBF},   // CJK extension A
	{0x20000, 0x2A6DF}, // CJK extension B
	{0xAC00, 0xD7A3},   // Hangul syllables
	{0x3041, 0x3096},   // Hiragana
	{0x30A1, 0x30FA},   // Katakana
	{0x0621, 0x064A},   // Arabic
	{0x0900, 0x097F},   // Devanagari (with signs)
	{0x0E01, 0x0E3A},   // Thai
	{0x0400, 0x04FF},   // Cyrillic
	{0x0370, 0x03FF},   // Greek
	{0x05D0, 0x05EA},   // Hebrew
	{0x10A0, 0x10FF},   // Georgian
	{0x0B80, 0x0BFF},   // Tamil
	{0x1200, 0x137F},   // Ethiopic
	{0x1E00, 0x1EFF},   // Latin extended additional
	{0x0100, 0x024F},   // Latin extended A and B
	{0x1F00, 0x1FFF},   // Greek extended
	{0x1780, 0x17FF},   // Khmer
	{0x0F00, 0x0FFF},   // Tibetan
}

func (g *generator) scriptWords() string {
	rng := scripts[g.intn(len(scripts))]
	var b strings.Builder
	for i := range 1 + g.intn(8) {
		if i > 0 {
			b.WriteString(g.pick([]string{" ", " ", "", "\n", ". ", "  "}))
		}
		for range 1 + g.intn(8) {
			b.WriteRune(rng[0] + rune(g.intn(int(rng[1]-rng[0]+1))))
		}
	}
	return b.String()
}

var (
	emojiBases = []string{"😀", "😂", "🥲", "🤖", "🚀", "🔥", "🎉", "🙈", "🦀", "🐍", "🌍", "🍕", "⭐", "☕", "⚡", "✅", "❌", "❤", "☺", "✌"}
	emojiHands = []string{"👍", "👋", "🙏", "💪", "👏", "🤝", "✋", "👌", "🧑", "👩", "👨"}
	skinTones  = []string{"\U0001F3FB", "\U0001F3FC", "\U0001F3FD", "\U0001F3FE", "\U0001F3FF"}
	zwjEmoji   = []string{
		"👩\u200d💻", "👨\u200d👩\u200d👧\u200d👦", "🏳\ufe0f\u200d🌈", "🧑\U0001F3FD\u200d🚀", "👩\U0001F3FF\u200d🔬",
		"❤\ufe0f\u200d🔥", "🐕\u200d🦺", "👁\ufe0f\u200d🗨\ufe0f", "🧔\u200d♂\ufe0f", "🏃\u200d♀\ufe0f\u200d➡\ufe0f",
	}
)

func (g *generator) emoji() string {
	var b strings.Builder
	for range 1 + g.intn(6) {
		switch g.intn(6) {
		case 0:
			b.WriteString(g.pick(emojiBases))
		case 1:
			b.WriteString(g.pick(emojiHands) + g.pick(skinTones))
		case 2:
			b.WriteString(g.pick(zwjEmoji))
		case 3: // a flag: two regional indicators
			b.WriteRune(0x1F1E6 + rune(g.intn(26)))
			b.WriteRune(0x1F1E6 + rune(g.intn(26)))
		case 4: // keycap or emoji presentation selector
			b.WriteString(g.pick([]string{"1\ufe0f\u20e3", "#\ufe0f\u20e3", "❤\ufe0f", "☺\ufe0f", "✌\ufe0f"}))
		case 5:
			b.WriteString(g.pick([]string{" ", "", " ok ", "!", "\n", "text"}))
		}
	}
	return b.String()
}

func (g *generator) combining() string {
	var b strings.Builder
	for range 1 + g.intn(6) {
		switch g.intn(5) {
		case 0: // a Latin letter with combining marks, often reordered by NFC
			b.WriteRune(rune(g.pick([]string{"a", "e", "o", "u", "n", "c", "A", "E", "s", "z", "ı", "i"})[0]))
			for range 1 + g.intn(3) {
				b.WriteRune(0x0300 + rune(g.intn(0x70)))
			}
		case 1: // decomposed forms NFC composes
			b.WriteString(g.pick([]string{"e\u0301", "A\u030a", "n\u0303", "o\u0308", "c\u0327", "\u1100\u1161\u11a8", "\u1112\u1161\u11ab", "\u304b\u3099", "\u0915\u093c", "\u05e9\u05bc\u05c1"}))
		case 2: // precomposed forms
			b.WriteString(g.pick([]string{"é", "Å", "ñ", "ö", "ç", "각", "한", "が", "क़", "ǖ", "ệ", "ḗ"}))
		case 3: // marks of other scripts
			b.WriteRune(0x0E01 + rune(g.intn(0x2e)))
			b.WriteRune(0x0E31 + rune(g.intn(0x0a)))
		case 4: // marks with nothing to combine with
			b.WriteString(g.pick([]string{" ", "\n", "", "-"}))
			b.WriteRune(0x0300 + rune(g.intn(0x70)))
		}
		if g.intn(3) == 0 {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// codeSnippets are short programs written for this corpus.
var codeSnippets = []string{
	"func main() {\n\tfmt.Println(\"hello, world\")\n\tfor i := 0; i < 10; i++ {\n\t\tsum += i * 2\n\t}\n}\n",
	"def tokenize(text: str) -> list[int]:\n    \"\"\"Split text.\"\"\"\n    return [ord(c) for c in text if c.isalnum()]\n\n\nif __name__ == '__main__':\n    print(tokenize('abc'))\n",
	"const answer = items.filter((x) => x.id !== null).map(x => `${x.name}: ${x.value}`);\nconsole.log(answer?.length ?? 0);\n",
	"#include <stdio.h>\nint main(void) {\n    int a[3] = {1, 2, 3};\n    printf(\"%d\\n\", a[0] + a[2]);\n    return 0;\n}\n",
	"fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
	"SELECT id, name, COUNT(*) AS n\nFROM users u\nJOIN orders o ON o.user_id = u.id\nWHERE u.created_at >= '2024-01-01'\nGROUP BY id, name\nORDER BY n DESC;\n",
	"<!DOCTYPE html>\n<html lang=\"en\">\n  <body>\n    <div class=\"main\">&nbsp;Hello &amp; welcome</div>\n  </body>\n</html>\n",
	"{\"model\": \"qwen3\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi!\"}], \"temperature\": 0.7, \"stream\": true}",
	"server:\n  port: 8080\n  hosts:\n    - alpha.local\n    - beta.local\n  tls: false   # comment\n",
	"#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.txt; do\n  wc -l \"$f\" | awk '{print $1}'\ndone 2>/dev/null\n",
	"public class Main {\n    public static void main(String[] args) {\n        System.out.println(\"x=\" + args.length);\n    }\n}\n",
	"    if (x != y && !done) { return -1; }  // TODO: fix\r\n    else\t{ x += 0x1F; }\r\n",
	"\\begin{equation}\n  E = mc^2 \\quad \\forall x \\in \\mathbb{R}\n\\end{equation}\n",
	"diff --git a/main.go b/main.go\n@@ -1,3 +1,4 @@\n-import \"fmt\"\n+import (\n+\t\"fmt\"\n+)\n",
}

var identifiers = []string{"userID", "max_tokens", "HTTPServer", "snake_case_name", "camelCase", "x", "i", "_private", "__init__", "ÄÖÜ", "变量", "kebab-case", "CONSTANT_VALUE"}

func (g *generator) code() string {
	s := g.pick(codeSnippets)
	if g.intn(2) == 0 {
		s = strings.ReplaceAll(s, "x", g.pick(identifiers))
	}
	if g.intn(3) == 0 {
		s = strings.ReplaceAll(s, "    ", "\t")
	}
	if g.intn(4) == 0 {
		s = strings.ReplaceAll(s, "\n", "\r\n")
	}
	if g.intn(4) == 0 {
		lines := strings.Split(s, "\n")
		s = strings.Join(lines[g.intn(len(lines)):], "\n")
	}
	return s
}

func (g *generator) whitespace() string {
	spaces := []string{" ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", "\u00a0", "\u3000", "\u2003", "\u2028", "\u0085", "\v", "\f", "   \n", " \t "}
	var b strings.Builder
	for range 1 + g.intn(8) {
		for range 1 + g.intn(4) {
			b.WriteString(g.pick(spaces))
		}
		if g.intn(3) > 0 {
			b.WriteString(g.pick([]string{"word", "a", "Z", "1", "。", "!", "é", "中", "x y", "-"}))
		}
	}
	return b.String()
}

func (g *generator) numbers() string {
	digitSets := [][2]rune{{'0', '9'}, {'0', '9'}, {'0', '9'}, {0x0660, 0x0669}, {0x06F0, 0x06F9}, {0x0966, 0x096F}, {0x0E50, 0x0E59}, {0xFF10, 0xFF19}, {0x1D7CE, 0x1D7FF}}
	var b strings.Builder
	for i := range 1 + g.intn(4) {
		if i > 0 {
			b.WriteString(g.pick([]string{" ", ", ", ".", "-", "/", ":", " + ", "e", "x", "\n"}))
		}
		set := digitSets[g.intn(len(digitSets))]
		for range 1 + g.intn(40) {
			b.WriteRune(set[0] + rune(g.intn(int(set[1]-set[0]+1))))
			if g.intn(12) == 0 {
				b.WriteString(g.pick([]string{",", ".", "_", " ", "'"}))
			}
		}
	}
	if g.intn(4) == 0 {
		b.WriteString(g.pick([]string{"½", "²", "³", "Ⅻ", "①", "%", "€", "$", "km", "th"}))
	}
	return b.String()
}

func (g *generator) contractions() string {
	words := []string{"I'll", "don't", "we're", "they've", "I'm", "she'd", "it's", "can't", "won't", "y'all", "o'clock", "rock'n'roll", "it'ſ", "'s", "'S", "'LL", "'Re", "'vE", "'m", "'d'", "''", "'", "don’t", "it’s"}
	var b strings.Builder
	for i := range 1 + g.intn(6) {
		if i > 0 {
			b.WriteString(g.pick([]string{" ", "", "\n", "  "}))
		}
		w := []byte(g.pick(words))
		for j := range w {
			if w[j] < utf8.RuneSelf && g.intn(3) == 0 {
				w[j] = byte(strings.ToUpper(string(w[j]))[0])
			}
		}
		b.Write(w)
	}
	return b.String()
}

func (g *generator) withAddedTokens() string {
	var b strings.Builder
	for range 1 + g.intn(5) {
		b.WriteString(g.pick([]string{"", " ", "  ", "\n", "text", "user\n", " hello ", "abc", "。", "\t", "1"}))
		b.WriteString(g.pick(AddedTokens))
		b.WriteString(g.pick([]string{"", " ", "\n", "\n\n", "assistant", "x", " world", "  "}))
	}
	return b.String()
}

func (g *generator) randomCodePoints() string {
	var b strings.Builder
	for range 1 + g.intn(30) {
		var r rune
		switch g.intn(6) {
		case 0:
			r = rune(g.intn(0x80))
		case 1:
			r = rune(0x80 + g.intn(0x780))
		case 2, 3:
			r = rune(g.intn(0x10000))
		default:
			r = rune(0x10000 + g.intn(0x100000))
		}
		if r >= 0xD800 && r <= 0xDFFF {
			r = 0xFFFD
		}
		b.WriteRune(r)
	}
	return b.String()
}

// long returns a long piece, beyond what BPE caches.
func (g *generator) long() string {
	n := 200 + g.intn(600)
	switch g.intn(5) {
	case 0:
		return strings.Repeat(g.pick([]string{"a", "ab", "中", "-", "=", "0"}), n)
	case 1:
		return strings.Repeat(" ", n) + "x"
	case 2:
		return strings.Repeat("\n", n/10) + strings.Repeat("\t", n/10)
	case 3:
		var b strings.Builder
		for range n {
			b.WriteRune(0x4E00 + rune(g.intn(0x5200)))
		}
		return b.String()
	default:
		var b strings.Builder
		for range n / 4 {
			b.WriteString(g.pick(languages[0]))
		}
		return b.String()
	}
}
