package grammar

import (
	"errors"
	"fmt"
)

// Builder composes a grammar from literal text, JSON Schemas and a few
// combinators, for outputs that are not a bare JSON document: a model
// family's tool call format wraps JSON in markers, e.g.
//
//	<tool_call>\n{"name":"get","arguments":{…}}\n</tool_call>
//
// Expressions belong to the Builder that made them. A Builder is not safe
// for concurrent use; the Grammar it builds is.
type Builder struct {
	c         *compiler
	err       error
	noStrings []noStrings // XML parameter values that must not be strings
}

// Expr is a part of a grammar under construction.
type Expr struct{ n *node }

// Prop is one property of Builder.Object.
type Prop struct {
	Key   string
	Value Expr
}

// NewBuilder returns an empty Builder.
func NewBuilder() *Builder {
	c := &compiler{refs: map[string]*node{}}
	c.anyVal = c.newAnyValue()
	return &Builder{c: c}
}

// Literal matches s exactly.
func (b *Builder) Literal(s string) Expr {
	if s == "" {
		b.fail(errors.New("grammar: empty literal"))
	}
	return Expr{b.c.lit(s)}
}

// JSONString matches s as a JSON string (compact, quoted).
func (b *Builder) JSONString(s string) Expr { return Expr{b.c.lit(string(encodeCanonical(s)))} }

// ObjectSchema matches a JSON object valid against schema (its $refs
// resolve within schema), as a tool's parameters are: a schema without type, $ref, anyOf or oneOf is taken as
// "type": "object"; otherwise only its object alternatives are kept (Build
// fails if there are none).
func (b *Builder) ObjectSchema(schema []byte) (Expr, error) {
	doc, err := parseOrdered(schema)
	if err != nil {
		return Expr{}, fmt.Errorf("grammar: schema: %w", err)
	}
	if o, ok := doc.(*object); ok {
		_, hasType := o.m["type"]
		_, hasRef := o.m["$ref"]
		_, hasAny := o.m["anyOf"]
		_, hasOne := o.m["oneOf"]
		_, hasEnum := o.m["enum"]
		_, hasConst := o.m["const"]
		if !hasType && !hasRef && !hasAny && !hasOne && !hasEnum && !hasConst {
			o.keys = append([]string{"type"}, o.keys...)
			o.m["type"] = "object"
		}
	}
	b.c.doc, b.c.refs = doc, map[string]*node{}
	n, err := b.c.compile(doc, "")
	if err != nil {
		return Expr{}, err
	}
	return Expr{b.c.add(&node{kind: kAlt, alts: []*node{n}, objOnly: true})}, nil
}

// AnyObject matches any JSON object.
func (b *Builder) AnyObject() Expr {
	return Expr{b.c.add(&node{kind: kObject, mapVal: b.c.anyVal})}
}

// Object matches a JSON object with exactly props, in order.
func (b *Builder) Object(props ...Prop) Expr {
	n := b.c.add(&node{kind: kObject})
	for _, p := range props {
		n.props = append(n.props, prop{key: append(encodeCanonical(p.Key), ':'), val: p.Value.n, required: true})
	}
	return Expr{n}
}

// Choice matches any one of alts.
func (b *Builder) Choice(alts ...Expr) Expr {
	n := b.c.add(&node{kind: kAlt})
	for _, a := range alts {
		n.alts = append(n.alts, a.n)
	}
	return Expr{n}
}

// Sequence matches parts one after the other.
func (b *Builder) Sequence(parts ...Expr) Expr {
	return b.Repeat(Expr{}, 1, 1, parts...)
}

// Repeat matches the sequence of parts min to max times (max -1: without
// bound but for the grammar's value budget), with sep (if its node is set)
// between repetitions.
func (b *Builder) Repeat(sep Expr, min, max int, parts ...Expr) Expr {
	if len(parts) == 0 || min < 0 || max == 0 || max >= 0 && max < min {
		b.fail(fmt.Errorf("grammar: bad repetition (%d parts, %d..%d)", len(parts), min, max))
	}
	n := b.c.add(&node{kind: kSeq, sep: sep.n, minRep: min, maxRep: max})
	for _, p := range parts {
		n.parts = append(n.parts, p.n)
	}
	return Expr{n}
}

// Optional matches the sequence of parts or nothing.
func (b *Builder) Optional(parts ...Expr) Expr { return b.Repeat(Expr{}, 0, 1, parts...) }

// Array matches a JSON array of min to max (-1: unbounded) items.
func (b *Builder) Array(item Expr, min, max int) Expr {
	return Expr{b.c.add(&node{kind: kArray, items: item.n, minItems: min, maxItems: max})}
}

func (b *Builder) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

// Build returns the grammar of root. The Builder must not be used after.
func (b *Builder) Build(root Expr) (*Grammar, error) {
	if b.err != nil {
		return nil, b.err
	}
	maxOpen := b.c.finish()
	for _, n := range b.c.nodes {
		if n.objOnly && len(n.flat) == 0 {
			return nil, unsupported("type", "", "the schema allows no JSON object")
		}
	}
	for _, ns := range b.noStrings {
		for _, f := range ns.n.flat {
			if f.kind == kString || f.kind == kLit && f.lit[0] == '"' {
				return nil, unsupported("type", ns.path, "a parameter that may be a string or another type (Qwen3-Coder's format cannot tell them apart)")
			}
		}
	}
	if root.n.minDepth > MaxDepth {
		return nil, errors.New("grammar: no instance within the nesting bound")
	}
	return &Grammar{root: root.n, maxOpen: maxOpen}, nil
}
