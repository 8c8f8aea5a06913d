package grammar

import (
	"fmt"
	"strings"
)

// Qwen3-Coder (and Qwen3.5, and GLM-4.5 with other tags) writes a call's
// arguments as XML-ish parameters, one per property, its value as raw
// text:
//
//	<parameter=city>
//	Paris
//	</parameter>
//
// A parameter whose schema is a string (type "string", or an enum/const of
// strings) is taken as the text itself, so its value is a raw string: no
// quotes, no escapes, and none of the characters JSON would escape, nor
// '<' (so "</parameter>" cannot occur inside). Any other parameter is a
// JSON value of its schema, which must not allow strings (the parser could
// not tell a string from text). XMLParamTypes tells the output parser
// which parameters are strings.

// xmlStringParam reports whether a property schema is a string parameter.
func xmlStringParam(s any) bool {
	o, ok := s.(*object)
	if !ok {
		return false
	}
	if t, ok := o.m["type"]; ok {
		return t == "string"
	}
	var values []any
	if c, ok := o.m["const"]; ok {
		values = append(values, c)
	}
	if e, ok := o.m["enum"].([]any); ok {
		values = append(values, e...)
	}
	for _, v := range values {
		if _, ok := v.(string); !ok {
			return false
		}
	}
	return len(values) > 0
}

// XMLParamTypes maps the properties of a parameters schema to "string"
// for string parameters (see above), to the type a property's schema
// names alone for the others ("boolean", "integer", …; Qwen3.5's template
// writes Python's True/False/None, which the output parser reads back by
// it), and "" when none is named.
func XMLParamTypes(schema []byte) map[string]string {
	doc, err := parseOrdered(schema)
	if err != nil {
		return nil
	}
	o, _ := doc.(*object)
	if o == nil {
		return nil
	}
	props, _ := o.m["properties"].(*object)
	if props == nil {
		return nil
	}
	out := map[string]string{}
	for _, k := range props.keys {
		switch ps, _ := props.m[k].(*object); {
		case xmlStringParam(props.m[k]):
			out[k] = "string"
		case ps != nil:
			out[k], _ = ps.m["type"].(string)
		default:
			out[k] = ""
		}
	}
	return out
}

// XMLParameters returns the parameters of a call in Qwen3-Coder's format,
// in schema order, optional ones optional.
func (b *Builder) XMLParameters(schema []byte) ([]Expr, error) {
	return b.taggedParameters(schema, "Qwen3-Coder", func(name string) (string, string) {
		return "<parameter=" + name + ">\n", "\n</parameter>\n"
	})
}

// GLMParameters returns the parameters of a call in GLM-4.5's format, one
// key/value pair per property, the values as XMLParameters writes them
// (a raw text for a string parameter, JSON otherwise):
//
//	<arg_key>city</arg_key>
//	<arg_value>Paris</arg_value>
func (b *Builder) GLMParameters(schema []byte) ([]Expr, error) {
	return b.taggedParameters(schema, "GLM-4.5", func(name string) (string, string) {
		return "<arg_key>" + name + "</arg_key>\n<arg_value>", "</arg_value>\n"
	})
}

// taggedParameters compiles the properties of schema, each between the
// texts tags gives for its name; format names the call format in errors.
func (b *Builder) taggedParameters(schema []byte, format string, tags func(name string) (open, close string)) ([]Expr, error) {
	doc, err := parseOrdered(schema)
	if err != nil {
		return nil, fmt.Errorf("grammar: schema: %w", err)
	}
	o, ok := doc.(*object)
	if !ok {
		return nil, unsupported("type", "", "the parameters must be an object schema")
	}
	for _, k := range o.keys {
		switch {
		case annotations[k], k == "properties", k == "required", k == "additionalProperties":
		case k == "type" && o.m[k] == "object":
		default:
			return nil, unsupported(k, "", format+"'s call format takes an object schema of properties")
		}
	}
	b.c.doc, b.c.refs = doc, map[string]*node{}
	props, _ := o.m["properties"].(*object)
	required := map[string]bool{}
	if list, ok := o.m["required"].([]any); ok {
		for _, r := range list {
			name, _ := r.(string)
			if props == nil || props.m[name] == nil {
				return nil, unsupported("required", "", fmt.Sprintf("%q is not among the properties", name))
			}
			required[name] = true
		}
	}
	var out []Expr
	if props == nil {
		return out, nil
	}
	for _, name := range props.keys {
		path := "/properties/" + escapePointer(name)
		if strings.ContainsAny(name, "<>\n") {
			return nil, unsupported("properties", path, "a name with <, > or a newline")
		}
		val, err := b.xmlValue(props.m[name], path)
		if err != nil {
			return nil, err
		}
		if val == nil {
			continue // schema false: never present
		}
		open, close := tags(name)
		parts := []Expr{b.Literal(open), {val}, b.Literal(close)}
		if required[name] {
			out = append(out, b.Sequence(parts...))
		} else {
			out = append(out, b.Optional(parts...))
		}
	}
	return out, nil
}

// xmlValue compiles one parameter's value; nil for schema false.
func (b *Builder) xmlValue(s any, path string) (*node, error) {
	if v, ok := s.(bool); ok && !v {
		return nil, nil
	}
	// Compile first: it checks every keyword.
	n, err := b.c.compile(s, path)
	if err != nil {
		return nil, err
	}
	if !xmlStringParam(s) {
		b.noStrings = append(b.noStrings, noStrings{n, path})
		return n, nil
	}
	o := s.(*object)
	if _, ok := o.m["type"]; !ok || o.m["enum"] != nil || o.m["const"] != nil {
		// enum/const of strings: the texts themselves.
		alt := b.c.add(&node{kind: kAlt})
		var values []any
		if c, ok := o.m["const"]; ok {
			values = append(values, c)
		} else {
			values, _ = o.m["enum"].([]any)
		}
		for _, v := range values {
			text, _ := v.(string)
			if text == "" || strings.ContainsAny(text, "<\n\r") {
				return nil, unsupported("enum", path, fmt.Sprintf("the value %q cannot be written as a raw parameter", text))
			}
			alt.alts = append(alt.alts, b.c.lit(text))
		}
		return alt, nil
	}
	raw := b.c.add(&node{kind: kRaw, maxLen: MaxStringLength})
	if raw.minLen, err = intKeyword(o, "minLength", path, 0); err != nil {
		return nil, err
	}
	if max, err := intKeyword(o, "maxLength", path, -1); err != nil {
		return nil, err
	} else if max >= 0 && max < raw.maxLen {
		raw.maxLen = max
	}
	src, kw := `^[^<]*$`, "type"
	if p, ok := o.m["pattern"].(string); ok {
		src, kw = p, "pattern"
	} else if f, ok := o.m["format"].(string); ok {
		src, kw = formats[f], "format"
	}
	if raw.dfa, err = compileRegex(src); err != nil {
		return nil, unsupported(kw, path, err.Error())
	}
	for st := range raw.dfa.next {
		if raw.dfa.next[st]['<'] >= 0 {
			return nil, unsupported(kw, path, "it allows '<', which a raw parameter cannot carry")
		}
	}
	if raw.minLen > raw.maxLen || int(raw.dfa.dist[0]) > raw.maxLen {
		return nil, fmt.Errorf("grammar: no string at %q fits its length bounds", path)
	}
	return raw, nil
}

type noStrings struct {
	n    *node
	path string
}
