package grammar

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Gemma 4 writes a call's arguments in its own notation, as its chat
// template renders them back:
//
//	{city:<|"|>Paris<|"|>,days:3,units:[<|"|>C<|"|>],opts:{metric:true}}
//
// Keys are bare; strings are raw text between <|"|> delimiters (no
// escapes); numbers, true, false and null are as in JSON (the template
// writes a null as None, which is allowed too); arrays are JSON's. The
// grammar writes properties in the template's order (dictsort: by name,
// case-insensitively) and quotes a key as a string only when it cannot be
// bare. A string holds what the package's patterns produce (see regex.go):
// no control characters, '"' or '\', so never the delimiter. The output
// parser (engine/parser, gemma4) reads exactly this back.
const gemmaQuote = `<|"|>`

// gemmaBareKey is a key the grammar writes unquoted.
var gemmaBareKey = regexp.MustCompile(`^[A-Za-z0-9_$.-]+$`)

// gemmaFreeKey is the pattern of a free-form object's keys.
const gemmaFreeKey = `^[A-Za-z_][A-Za-z0-9_.-]{0,63}$`

// GemmaArguments matches a call's arguments valid against schema, as
// ObjectSchema does, in Gemma 4's notation; a nil schema allows any object.
func (b *Builder) GemmaArguments(schema []byte) (Expr, error) {
	json := b.AnyObject()
	if schema != nil {
		var err error
		if json, err = b.ObjectSchema(schema); err != nil {
			return Expr{}, err
		}
	}
	g := gemmaTranslator{b: b, memo: map[*node]*node{}}
	n, err := g.node(json.n)
	if err != nil {
		return Expr{}, err
	}
	return Expr{n}, nil
}

// gemmaTranslator rewrites a compiled JSON grammar graph into Gemma 4's
// notation, node for node (cycles of $ref included).
type gemmaTranslator struct {
	b        *Builder
	memo     map[*node]*node
	text     *dfa // free strings
	freeKeys *dfa
}

func (g *gemmaTranslator) node(n *node) (*node, error) {
	if t, ok := g.memo[n]; ok {
		return t, nil
	}
	c := g.b.c
	switch n.kind {
	case kNumber:
		g.memo[n] = n // the same syntax
		return n, nil
	case kLit:
		t, err := g.literal(n.lit)
		g.memo[n] = t
		return t, err
	case kString:
		raw := c.add(&node{kind: kRaw, minLen: n.minLen, maxLen: n.maxLen, dfa: n.dfa})
		if raw.dfa == nil {
			if g.text == nil {
				g.text, _ = compileRegex(`^.*$`)
			}
			raw.dfa = g.text
		}
		t := c.add(&node{kind: kSeq, minRep: 1, maxRep: 1, parts: []*node{c.lit(gemmaQuote), raw, c.lit(gemmaQuote)}})
		g.memo[n] = t
		return t, nil
	case kAlt:
		t := c.add(&node{kind: kAlt, objOnly: n.objOnly})
		g.memo[n] = t
		for _, a := range n.alts {
			ta, err := g.node(a)
			if err != nil {
				return nil, err
			}
			t.alts = append(t.alts, ta)
		}
		return t, nil
	case kArray:
		t := c.add(&node{kind: kArray, minItems: n.minItems, maxItems: n.maxItems})
		g.memo[n] = t
		var err error
		if t.items, err = g.node(n.items); err != nil {
			return nil, err
		}
		for _, p := range n.prefix {
			tp, err := g.node(p)
			if err != nil {
				return nil, err
			}
			t.prefix = append(t.prefix, tp)
		}
		return t, nil
	case kObject:
		t := c.add(&node{kind: kObject})
		g.memo[n] = t
		props := slices.Clone(n.props)
		slices.SortStableFunc(props, func(a, b prop) int {
			return strings.Compare(strings.ToLower(jsonKey(a.key)), strings.ToLower(jsonKey(b.key)))
		})
		for _, p := range props {
			key, err := gemmaKey(jsonKey(p.key))
			if err != nil {
				return nil, err
			}
			val, err := g.node(p.val)
			if err != nil {
				return nil, err
			}
			t.props = append(t.props, prop{key: []byte(key + ":"), val: val, required: p.required})
		}
		if n.mapVal != nil {
			var err error
			if t.mapVal, err = g.node(n.mapVal); err != nil {
				return nil, err
			}
			if g.freeKeys == nil {
				g.freeKeys, _ = compileRegex(gemmaFreeKey)
			}
			t.freeKey = c.add(&node{kind: kRaw, minLen: 1, maxLen: 64, dfa: g.freeKeys})
		}
		return t, nil
	}
	return nil, fmt.Errorf("grammar: Gemma 4 notation: unexpected node kind %d", n.kind)
}

// jsonKey decodes a prop key (`"name":`).
func jsonKey(k []byte) string {
	var s string
	_ = json.Unmarshal(k[:len(k)-1], &s)
	return s
}

// gemmaKey writes a property name bare, or quoted when it cannot be.
func gemmaKey(name string) (string, error) {
	if gemmaBareKey.MatchString(name) {
		return name, nil
	}
	if name == "" || strings.Contains(name, gemmaQuote) {
		return "", unsupported("properties", "", fmt.Sprintf("the name %q cannot be written in Gemma 4's notation", name))
	}
	return gemmaQuote + name + gemmaQuote, nil
}

// literal is a canonical JSON value (an enum or const member, true,
// false, null) in Gemma 4's notation.
func (g *gemmaTranslator) literal(lit []byte) (*node, error) {
	c := g.b.c
	if string(lit) == "null" {
		return c.add(&node{kind: kAlt, alts: []*node{c.lit("null"), c.lit("None")}}), nil
	}
	v, err := parseOrdered(lit)
	if err != nil {
		return nil, fmt.Errorf("grammar: literal %s: %w", lit, err)
	}
	var b strings.Builder
	if err := gemmaValue(&b, v); err != nil {
		return nil, err
	}
	return c.lit(b.String()), nil
}

// gemmaValue writes a parsed JSON value in Gemma 4's notation.
func gemmaValue(b *strings.Builder, v any) error {
	switch v := v.(type) {
	case string:
		if strings.Contains(v, gemmaQuote) {
			return unsupported("enum", "", fmt.Sprintf("the value %q holds Gemma 4's string delimiter", v))
		}
		b.WriteString(gemmaQuote + v + gemmaQuote)
	case *object:
		b.WriteByte('{')
		keys := slices.Clone(v.keys)
		slices.SortStableFunc(keys, func(x, y string) int { return strings.Compare(strings.ToLower(x), strings.ToLower(y)) })
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			key, err := gemmaKey(k)
			if err != nil {
				return err
			}
			b.WriteString(key + ":")
			if err := gemmaValue(b, v.m[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := gemmaValue(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	default:
		b.Write(encodeCanonical(v))
	}
	return nil
}
