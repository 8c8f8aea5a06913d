package chattemplate

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// pyStr returns Python's str() of a template value, which is what Jinja2
// filters such as trim, string and join see: "None", "True", "1.0",
// "['a', 1]", "{'k': 'v'}", and "" for an undefined value.
func pyStr(v jinja.Value) string {
	switch {
	case v.IsString():
		return v.AsString()
	case v.IsUndefined():
		return ""
	}
	return pyRepr(v)
}

// pyRepr returns Python's repr() of a template value.
func pyRepr(v jinja.Value) string {
	switch {
	case v.IsUndefined():
		return "Undefined"
	case v.IsNone():
		return "None"
	case v.IsBool():
		if v.AsBool() {
			return "True"
		}
		return "False"
	case v.IsInt():
		return strconv.FormatInt(v.AsInt(), 10)
	case v.IsFloat():
		return pyFloatRepr(v.AsFloat())
	case v.IsString():
		return pyStrRepr(v.AsString())
	case v.IsList():
		var b strings.Builder
		b.WriteByte('[')
		for i, item := range v.AsList().Items {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(pyRepr(item))
		}
		b.WriteByte(']')
		return b.String()
	case v.IsDict():
		d := v.AsDict()
		var b strings.Builder
		b.WriteByte('{')
		for i, k := range d.Keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(pyStrRepr(k))
			b.WriteString(": ")
			b.WriteString(pyRepr(d.Data[k]))
		}
		b.WriteByte('}')
		return b.String()
	}
	return fmt.Sprintf("<function %s>", v.AsCallable().Name)
}

// pyStrRepr quotes s as Python's repr() does: single quotes unless s holds
// a single quote and no double quote, backslash escapes for the quote,
// backslash, \t \n \r, and \x/\u/\U escapes for unprintable characters.
func pyStrRepr(s string) string {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	var b strings.Builder
	b.WriteByte(quote)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == rune(quote) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x7f || unicode.IsPrint(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteByte(quote)
	return b.String()
}

// pyTypeName names a value's Python type, for error messages.
func pyTypeName(v jinja.Value) string {
	switch {
	case v.IsUndefined():
		return "Undefined"
	case v.IsNone():
		return "NoneType"
	case v.IsBool():
		return "bool"
	case v.IsInt():
		return "int"
	case v.IsFloat():
		return "float"
	case v.IsString():
		return "str"
	case v.IsList():
		return "list"
	case v.IsDict():
		return "dict"
	}
	return "function"
}

// isPySpace reports whether Python's str.isspace() holds for r, the
// whitespace str.strip() and str.split() use. It adds the ASCII separators
// U+001C..U+001F to Go's unicode.IsSpace.
func isPySpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}
