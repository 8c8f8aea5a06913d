package chattemplate

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// pyJSONOptions mirrors the json.dumps arguments templates pass to tojson.
type pyJSONOptions struct {
	ensureASCII bool
	indent      string // used when indented is true
	indented    bool
	itemSep     string
	keySep      string
	sortKeys    bool
}

// encodePyJSON writes v exactly as Python's json.dumps would with opts.
func encodePyJSON(v jinja.Value, opts pyJSONOptions) (string, error) {
	e := pyJSONEncoder{opts: opts}
	if err := e.value(v, 0); err != nil {
		return "", err
	}
	return e.b.String(), nil
}

type pyJSONEncoder struct {
	b    strings.Builder
	opts pyJSONOptions
}

func (e *pyJSONEncoder) value(v jinja.Value, depth int) error {
	switch {
	case v.IsNone():
		e.b.WriteString("null")
	case v.IsBool():
		if v.AsBool() {
			e.b.WriteString("true")
		} else {
			e.b.WriteString("false")
		}
	case v.IsInt():
		e.b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		e.b.WriteString(pyJSONFloat(v.AsFloat()))
	case v.IsString():
		e.str(v.AsString())
	case v.IsList():
		return e.list(v.AsList().Items, depth)
	case v.IsDict():
		return e.dict(v.AsDict(), depth)
	case v.IsUndefined():
		return fmt.Errorf("Object of type Undefined is not JSON serializable")
	default:
		return fmt.Errorf("Object of type %s is not JSON serializable", pyTypeName(v))
	}
	return nil
}

// newline starts a new line indented depth levels.
func (e *pyJSONEncoder) newline(depth int) {
	e.b.WriteByte('\n')
	for range depth {
		e.b.WriteString(e.opts.indent)
	}
}

func (e *pyJSONEncoder) list(items []jinja.Value, depth int) error {
	if len(items) == 0 {
		e.b.WriteString("[]")
		return nil
	}
	e.b.WriteByte('[')
	for i, item := range items {
		if i > 0 {
			e.b.WriteString(e.opts.itemSep)
		}
		if e.opts.indented {
			e.newline(depth + 1)
		}
		if err := e.value(item, depth+1); err != nil {
			return err
		}
	}
	if e.opts.indented {
		e.newline(depth)
	}
	e.b.WriteByte(']')
	return nil
}

func (e *pyJSONEncoder) dict(d *jinja.Dict, depth int) error {
	if d.Len() == 0 {
		e.b.WriteString("{}")
		return nil
	}
	keys := d.Keys
	if e.opts.sortKeys {
		keys = append([]string(nil), keys...)
		sort.Strings(keys) // UTF-8 byte order is code point order, as in Python.
	}
	e.b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			e.b.WriteString(e.opts.itemSep)
		}
		if e.opts.indented {
			e.newline(depth + 1)
		}
		e.str(k)
		e.b.WriteString(e.opts.keySep)
		if err := e.value(d.Data[k], depth+1); err != nil {
			return err
		}
	}
	if e.opts.indented {
		e.newline(depth)
	}
	e.b.WriteByte('}')
	return nil
}

// str writes a JSON string literal the way Python does: only '"', '\\' and
// control characters are escaped (\n \r \t \b \f short forms, others
// \u00XX); with ensureASCII every non-ASCII character becomes \uXXXX
// (UTF-16 surrogate pairs beyond the BMP).
func (e *pyJSONEncoder) str(s string) {
	const hex = "0123456789abcdef"
	e.b.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == '"':
			e.b.WriteString(`\"`)
		case r == '\\':
			e.b.WriteString(`\\`)
		case r == '\n':
			e.b.WriteString(`\n`)
		case r == '\r':
			e.b.WriteString(`\r`)
		case r == '\t':
			e.b.WriteString(`\t`)
		case r == '\b':
			e.b.WriteString(`\b`)
		case r == '\f':
			e.b.WriteString(`\f`)
		case r < 0x20 || (e.opts.ensureASCII && r > 0x7e):
			units := []uint16{uint16(r)}
			if r > 0xffff {
				hi, lo := utf16.EncodeRune(r)
				units = []uint16{uint16(hi), uint16(lo)}
			}
			for _, u := range units {
				e.b.WriteString(`\u`)
				e.b.WriteByte(hex[u>>12&0xf])
				e.b.WriteByte(hex[u>>8&0xf])
				e.b.WriteByte(hex[u>>4&0xf])
				e.b.WriteByte(hex[u&0xf])
			}
		default:
			e.b.WriteRune(r)
		}
	}
	e.b.WriteByte('"')
}

// pyJSONFloat formats f as Python's json module does: float.__repr__ for
// finite values, NaN/Infinity/-Infinity otherwise.
func pyJSONFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return pyFloatRepr(f)
}

// pyFloatRepr formats a finite float as Python's repr(): the shortest
// digits that round-trip, positional notation when the decimal exponent is
// in [-4, 16), scientific otherwise ("1e-05", "1.5e+16"), and always a
// fraction or an exponent ("1.0").
func pyFloatRepr(f float64) string {
	if math.IsNaN(f) {
		return "nan"
	}
	if math.IsInf(f, 0) {
		if f > 0 {
			return "inf"
		}
		return "-inf"
	}
	// 'e' with -1 precision gives the shortest round-trip digits:
	// "-d.ddde±XX".
	sci := strconv.FormatFloat(f, 'e', -1, 64)
	sign := ""
	if sci[0] == '-' {
		sign, sci = "-", sci[1:]
	}
	mant, expStr, _ := strings.Cut(sci, "e")
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)

	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := "+"
		if exp < 0 {
			es, exp = "-", -exp
		}
		return fmt.Sprintf("%s%se%s%02d", sign, m, es, exp)
	}
	var out string
	switch {
	case exp < 0:
		out = "0." + strings.Repeat("0", -exp-1) + digits
	case exp+1 >= len(digits):
		out = digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	default:
		out = digits[:exp+1] + "." + digits[exp+1:]
	}
	return sign + out
}
