package chattemplate

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// The engine is extended by rewriting the template source before it is
// compiled; the rewritten template behaves as Jinja2 would on the original:
//
//   - newlines are normalised and one trailing newline dropped, as Jinja2's
//     lexer does;
//   - "x | name" becomes "x | fusion_name" for the filters this package
//     implements (the engine resolves its own filters before variables, so
//     ours are passed as variables under the prefixed names);
//   - "{{ expr }}" becomes "{{ (expr) | fusion_str }}", so output is
//     Python's str() of the value ("None", "1.0", "['a']") as in Jinja2;
//   - string literals are decoded with Python's escape rules (\u00e9, \x41,
//     \r, ...) and re-encoded in the subset the engine reads;
//   - ".strip()", ".lstrip()" and ".rstrip()" name the characters Python's
//     str.isspace() holds for (the engine's own set misses U+001C..U+001F).
//
// Text, comments and {% raw %} blocks are copied unchanged.

// filterPrefix is prepended to the names of the filters implemented here.
const filterPrefix = "fusion_"

// outputFilter is the filter (without prefix) wrapped around every {{ }}.
const outputFilter = "str"

// preprocess returns src rewritten for the engine. filters names the
// filters to redirect to their prefixed implementations.
func preprocess(src string, filters map[string]bool) string {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	src = strings.TrimSuffix(src, "\n")

	var out strings.Builder
	out.Grow(len(src) + len(src)/8)
	inRaw := false
	for i := 0; i < len(src); {
		open := strings.IndexByte(src[i:], '{')
		if open < 0 || i+open+1 >= len(src) {
			out.WriteString(src[i:])
			break
		}
		open += i
		var closer string
		switch src[open+1] {
		case '{':
			closer = "}}"
		case '%':
			closer = "%}"
		case '#':
			closer = "#}"
		default:
			out.WriteString(src[i : open+1])
			i = open + 1
			continue
		}
		out.WriteString(src[i:open])
		end, closed := tagEnd(src, open+2, closer)
		tag := src[open:end]
		i = end
		switch {
		case closer == "#}" || !closed:
			out.WriteString(tag)
		case closer == "%}" && isStatement(tag, "endraw"):
			inRaw = false
			out.WriteString(tag)
		case inRaw:
			out.WriteString(tag)
		case closer == "%}" && isStatement(tag, "raw"):
			inRaw = true
			out.WriteString(tag)
		case closer == "}}":
			out.WriteString(rewriteOutput(tag, filters))
		default:
			out.WriteString(rewriteCode(tag, filters))
		}
	}
	return out.String()
}

// tagEnd returns the index just past closer and whether it was found. In
// expressions and statements it skips quoted strings and, as Jinja2's
// lexer does, a closer inside open brackets ("{{ {'a': {}} }}").
func tagEnd(src string, from int, closer string) (int, bool) {
	depth := 0
	for i := from; i < len(src); i++ {
		c := src[i]
		if closer == "#}" {
			if strings.HasPrefix(src[i:], closer) {
				return i + len(closer), true
			}
			continue
		}
		switch c {
		case '\'', '"':
			i = stringEnd(src, i) - 1
			continue
		case '(', '[', '{':
			depth++
			continue
		case ')', ']':
			depth = max(depth-1, 0)
			continue
		}
		if depth == 0 && strings.HasPrefix(src[i:], closer) {
			return i + len(closer), true
		}
		if c == '}' {
			depth = max(depth-1, 0)
		}
	}
	return len(src), false
}

// stringEnd returns the index just past the string literal starting at
// src[start] (a quote), honouring backslash escapes.
func stringEnd(src string, start int) int {
	quote := src[start]
	for i := start + 1; i < len(src); i++ {
		switch src[i] {
		case '\\':
			i++
		case quote:
			return i + 1
		}
	}
	return len(src)
}

// isStatement reports whether the {% %} tag starts with keyword.
func isStatement(tag, keyword string) bool {
	body := strings.TrimLeft(tag[2:], "-+ \t\n")
	if !strings.HasPrefix(body, keyword) {
		return false
	}
	rest := body[len(keyword):]
	return rest == "" || !isIdentByte(rest[0])
}

// rewriteOutput wraps the expression of a {{ }} tag in the str filter,
// keeping its whitespace-control markers.
func rewriteOutput(tag string, filters map[string]bool) string {
	body := tag[2 : len(tag)-2]
	lead, trail := "", ""
	if strings.HasPrefix(body, "-") || strings.HasPrefix(body, "+") {
		lead, body = body[:1], body[1:]
	}
	if strings.HasSuffix(body, "-") || strings.HasSuffix(body, "+") {
		body, trail = body[:len(body)-1], body[len(body)-1:]
	}
	if strings.TrimSpace(body) == "" {
		return tag
	}
	return "{{" + lead + " (" + rewriteCode(body, filters) + ") | " + filterPrefix + outputFilter + " " + trail + "}}"
}

// rewriteCode re-encodes string literals and renames filters after '|' in
// the code of one tag.
func rewriteCode(code string, filters map[string]bool) string {
	var out strings.Builder
	afterPipe := false
	for i := 0; i < len(code); {
		c := code[i]
		switch {
		case c == '\'' || c == '"':
			end := stringEnd(code, i)
			out.WriteString(reencodeString(code[i:end]))
			i = end
			afterPipe = false
		case isIdentStart(c):
			j := i + 1
			for j < len(code) && isIdentByte(code[j]) {
				j++
			}
			name := code[i:j]
			if afterPipe && filters[name] {
				out.WriteString(filterPrefix)
			}
			out.WriteString(name)
			i = j
			afterPipe = false
			if k := emptyCall(code, j); k > 0 && isStripMethod(code, i-len(name), name) {
				// The engine strips Go's whitespace, not str.isspace()'s
				// (U+001C..U+001F): name the characters.
				out.WriteString("('" + pyWhitespace + "')")
				i = k
			}
		case c == ' ' || c == '\t' || c == '\n':
			out.WriteByte(c)
			i++
		case c == '}' && i > 0 && code[i-1] == '}':
			// The engine ends a tag at the first "}}" outside strings.
			out.WriteString(" }")
			i++
		default:
			afterPipe = c == '|'
			out.WriteByte(c)
			i++
		}
	}
	return out.String()
}

// pyWhitespace is what Python's str.isspace() holds for, written as a
// string literal the engine reads (\t and \n escaped, the rest raw).
const pyWhitespace = `\t\n` + "\v\f\r\x1c\x1d\x1e\x1f \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"

// isStripMethod reports whether the identifier name at code[at:] is a
// strip, lstrip or rstrip method (it follows a '.').
func isStripMethod(code string, at int, name string) bool {
	return (name == "strip" || name == "lstrip" || name == "rstrip") && at > 0 && code[at-1] == '.'
}

// emptyCall returns the index just past "()" (spaces allowed inside) at
// code[from:], or -1.
func emptyCall(code string, from int) int {
	if from >= len(code) || code[from] != '(' {
		return -1
	}
	j := from + 1
	for j < len(code) && (code[j] == ' ' || code[j] == '\t') {
		j++
	}
	if j < len(code) && code[j] == ')' {
		return j + 1
	}
	return -1
}

func isIdentStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdentByte(c byte) bool {
	return isIdentStart(c) || (c >= '0' && c <= '9')
}

// reencodeString turns a Jinja2 string literal (quotes included) into one
// the engine decodes to the same value. Jinja2 decodes literals with
// Python's unicode_escape rules; the engine only knows \n \t \\ \' \" and
// otherwise copies bytes, so the value is written raw with just the
// backslash and the quote escaped. A literal Python would reject is left
// as it is.
func reencodeString(lit string) string {
	if len(lit) < 2 || lit[len(lit)-1] != lit[0] {
		return lit
	}
	val, ok := pyUnescape(lit[1 : len(lit)-1])
	if !ok {
		return lit
	}
	quote := lit[0]
	var b strings.Builder
	b.WriteByte(quote)
	for i := 0; i < len(val); i++ {
		if val[i] == '\\' || val[i] == quote {
			b.WriteByte('\\')
		}
		b.WriteByte(val[i])
	}
	b.WriteByte(quote)
	return b.String()
}

// pyUnescape decodes backslash escapes as Python's unicode_escape codec
// does. \N{name} is not supported and reported as not ok.
func pyUnescape(s string) (string, bool) {
	if strings.IndexByte(s, '\\') < 0 {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		if i+1 == len(s) {
			return "", false // a lone trailing backslash
		}
		i++
		switch e := s[i]; e {
		case '\n':
			// Line continuation: both characters disappear.
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i
			for j < len(s) && j < i+3 && s[j] >= '0' && s[j] <= '7' {
				j++
			}
			n, _ := strconv.ParseUint(s[i:j], 8, 32)
			b.WriteRune(rune(n))
			i = j - 1
		case 'x', 'u', 'U':
			width := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+1+width > len(s) {
				return "", false
			}
			n, err := strconv.ParseUint(s[i+1:i+1+width], 16, 32)
			if err != nil || n > utf8.MaxRune {
				return "", false
			}
			b.WriteRune(rune(n))
			i += width
		case 'N':
			return "", false
		default:
			// Unknown escapes stay as written.
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String(), true
}
