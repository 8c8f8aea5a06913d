// Package grammar constrains decoding to JSON documents that satisfy a JSON
// Schema.
//
// Compile turns a schema into a Grammar: a graph of value nodes (objects,
// arrays, strings, numbers, literals and alternatives). A Matcher, made per
// request with NewMatcher, runs that graph as a nondeterministic pushdown
// automaton over the bytes of the output: each thread is a stack of frames
// (object, array, string, number, literal) whose parents are shared and
// immutable, so cloning a state copies a few small structs. Alternatives
// (anyOf, oneOf, enum, optional properties, multiple types) fork threads;
// threads that reject a byte die.
//
// A Vocab is a byte trie over a tokenizer's vocabulary, built once and shared
// by every request. Matcher.Mask walks the trie depth first, advancing a copy
// of the automaton along each edge and pruning where it dies, so the cost is
// proportional to the part of the trie that is still allowed, and writes a
// sample.Bitset with one bit per token id.
//
// The output is canonical, compact JSON: no whitespace anywhere, object
// properties in schema order (required ones always present, optional ones
// may be left out, no others), so a model cannot loop on whitespace. To make
// every generation terminate, the grammar bounds what the schema leaves
// open:
//
//   - strings: at most MaxStringLength code points unless maxLength is
//     smaller; \u escapes may not start with d or D (no surrogates);
//   - numbers: at most MaxIntDigits digits before the point, MaxFracDigits
//     after it, and MaxExpDigits in the exponent;
//   - nesting: at most MaxDepth open values; alternatives and optional
//     values that could not be finished within that depth are not offered;
//   - size: once a document has started MaxValues values (scalars and
//     containers), no optional value (optional property, array item beyond
//     minItems, free-form key) is offered, and required values take only
//     the alternatives of least nesting, so the document closes in a bounded
//     number of further bytes.
//
// Enforced keywords: type (one or a list), properties, required,
// additionalProperties (false, or a schema for objects without properties),
// items, prefixItems, additionalItems (tuples in both drafts), minItems,
// maxItems, enum, const, anyOf, oneOf (as alternatives: overlapping oneOf
// branches are not excluded), allOf (merged, see allof.go), $ref (#,
// #/$defs/<name>, #/definitions/<name>, recursion included), minLength,
// maxLength, pattern (the subset in regex.go), format (date, time,
// date-time, uuid, ipv4, email, each as a pattern of a subset of the valid
// values) and minimum, maximum, exclusiveMinimum, exclusiveMaximum
// (bounds.go: any bound on integers, integral bounds on numbers). Every
// other keyword is refused with an *UnsupportedError naming it;
// annotations (title, description, default, examples, $comment, $schema,
// root $id, deprecated, readOnly, writeOnly) are ignored.
//
// Every state knows the fewest bytes that finish its document (cost.go);
// under Matcher.SetBudget, Mask allows only tokens after which the document
// still fits in the tokens left, so a generation cut by max_tokens still
// ends with a whole document. Builder composes grammars for outputs around
// JSON (a model family's tool call markers).
package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Bounds on what a schema leaves open; see the package comment.
const (
	MaxStringLength = 1024
	MaxIntDigits    = 15
	MaxFracDigits   = 15
	MaxExpDigits    = 2
	MaxDepth        = 32
	MaxValues       = 2048
)

// UnsupportedError reports a schema keyword the compiler does not enforce.
type UnsupportedError struct {
	Keyword string // the keyword, e.g. "pattern"
	Path    string // JSON pointer of the schema holding it ("" is the root)
	Reason  string // optional detail
}

func (e *UnsupportedError) Error() string {
	s := fmt.Sprintf("grammar: unsupported keyword %q at %q", e.Keyword, e.Path)
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

type kind uint8

const (
	kLit kind = iota
	kString
	kNumber
	kObject
	kArray
	kAlt // alternatives; also $ref (one alternative)
	kSeq // parts in order, repeated minRep..maxRep times with sep between
	kRaw // unquoted text of a DFA (dfa, minLen, maxLen): a string outside JSON
)

type prop struct {
	key      []byte // `"name":`
	val      *node
	required bool
}

type node struct {
	kind kind
	lit  []byte // kLit

	minLen, maxLen int  // kString, code points
	dfa            *dfa // kString: pattern/format; kNumber: bounds (nil: none)
	integer        bool // kNumber

	props   []prop
	nextReq []int // nextReq[i]: first required index >= i, or len(props)
	mapVal  *node // kObject: free keys with these values (nil: only props)
	freeKey *node // kObject: free keys' node when they are not JSON strings (Gemma 4's bare keys)

	items              *node   // kArray: items after prefix
	prefix             []*node // kArray: the first items (prefixItems, tuple items)
	minItems, maxItems int

	alts    []*node // kAlt
	objOnly bool    // kAlt: stands only for its object alternatives

	parts          []*node // kSeq
	sep            *node   // kSeq: between repetitions, or nil
	minRep, maxRep int     // kSeq: maxRep -1 is unbounded

	flat     []*node // concrete nodes this stands for (self if concrete)
	minDepth int     // frames needed to finish a value of this node
	minBytes int32   // bytes of the shortest value of this node
	reqCost  []int32 // kObject: reqCost[i] = bytes of ,"key":value for the required props from i on
}

// Grammar is a compiled schema. It is immutable and safe for concurrent use.
type Grammar struct {
	root    *node
	maxOpen int32 // see Matcher.maxOpen
}

const infDepth = 1 << 30

// Compile compiles a JSON Schema (draft 2020-12 / draft-07 subset).
func Compile(schema []byte) (*Grammar, error) {
	doc, err := parseOrdered(schema)
	if err != nil {
		return nil, fmt.Errorf("grammar: schema: %w", err)
	}
	c := &compiler{doc: doc, refs: map[string]*node{}}
	c.anyVal = c.newAnyValue()
	root, err := c.compile(doc, "")
	if err != nil {
		return nil, err
	}
	maxOpen := c.finish()
	if root.minDepth > MaxDepth {
		return nil, errors.New("grammar: schema has no instance within the nesting bound")
	}
	return &Grammar{root: root, maxOpen: maxOpen}, nil
}

// JSONObject returns the grammar of json_object mode: any JSON object.
func JSONObject() *Grammar {
	c := &compiler{refs: map[string]*node{}}
	c.anyVal = c.newAnyValue()
	obj := c.add(&node{kind: kObject, mapVal: c.anyVal})
	return &Grammar{root: obj, maxOpen: c.finish()}
}

type compiler struct {
	doc     any
	merging int // nested allOf merges
	refs    map[string]*node
	nodes   []*node
	anyVal  *node
}

func (c *compiler) add(n *node) *node {
	c.nodes = append(c.nodes, n)
	return n
}

func (c *compiler) newAnyValue() *node {
	any := c.add(&node{kind: kAlt})
	str := c.add(&node{kind: kString, maxLen: MaxStringLength})
	any.alts = []*node{
		c.add(&node{kind: kObject, mapVal: any}),
		c.add(&node{kind: kArray, items: any, maxItems: -1}),
		str,
		c.add(&node{kind: kNumber}),
		c.lit("true"), c.lit("false"), c.lit("null"),
	}
	return any
}

func (c *compiler) lit(s string) *node { return c.add(&node{kind: kLit, lit: []byte(s)}) }

var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true,
	"$comment": true, "$schema": true, "deprecated": true, "readOnly": true,
	"writeOnly": true, "$defs": true, "definitions": true,
}

// keywords enforced by compile, other than annotations.
var known = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "minItems": true, "maxItems": true, "enum": true, "const": true,
	"prefixItems": true, "additionalItems": true, "allOf": true,
	"anyOf": true, "oneOf": true, "$ref": true, "minLength": true, "maxLength": true,
	"pattern": true, "format": true, "minimum": true, "maximum": true,
	"exclusiveMinimum": true, "exclusiveMaximum": true,
}

// formats maps the supported string formats to patterns of a subset of
// their valid values: dates are real calendar dates but never February 29;
// times have no leap second; emails are ASCII with bounded parts.
var formats = map[string]string{
	"date":      `^` + datePat + `$`,
	"time":      `^` + timePat + `$`,
	"date-time": `^` + datePat + `T` + timePat + `$`,
	"uuid":      `^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`,
	"ipv4":      `^(?:` + octetPat + `\.){3}` + octetPat + `$`,
	"email":     `^[a-zA-Z0-9_+-]{1,16}(?:\.[a-zA-Z0-9_+-]{1,16}){0,2}@[a-zA-Z0-9]{1,16}(?:\.[a-zA-Z0-9]{1,16}){1,3}$`,
}

const (
	datePat  = `[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))`
	timePat  = `(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])`
	octetPat = `(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])`
)

func (c *compiler) compile(s any, path string) (*node, error) {
	switch s := s.(type) {
	case bool:
		if s {
			return c.anyVal, nil
		}
		return c.add(&node{kind: kAlt}), nil // no alternatives: nothing matches
	case *object:
		return c.compileObject(s, path)
	}
	return nil, fmt.Errorf("grammar: schema at %q is not an object or boolean", path)
}

func unsupported(kw, path, reason string) error {
	return &UnsupportedError{Keyword: kw, Path: path, Reason: reason}
}

func (c *compiler) compileObject(s *object, path string) (*node, error) {
	constraints := 0
	for _, k := range s.keys {
		if annotations[k] {
			continue
		}
		if k == "$id" && path == "" {
			continue
		}
		if !known[k] {
			return nil, unsupported(k, path, "")
		}
		constraints++
	}
	if _, ok := s.m["allOf"]; ok {
		merged, err := c.mergeAllOf(s, path)
		if err != nil {
			return nil, err
		}
		return c.compile(merged, path)
	}
	for _, kw := range []string{"$ref", "anyOf", "oneOf"} {
		if _, ok := s.m[kw]; ok && constraints > 1 {
			return nil, unsupported(kw, path, "with sibling constraint keywords")
		}
	}
	if r, ok := s.m["$ref"]; ok {
		ref, ok := r.(string)
		if !ok {
			return nil, fmt.Errorf("grammar: $ref at %q is not a string", path)
		}
		return c.ref(ref, path)
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		if v, ok := s.m[kw]; ok {
			list, ok := v.([]any)
			if !ok || len(list) == 0 {
				return nil, fmt.Errorf("grammar: %s at %q is not a non-empty array", kw, path)
			}
			alt := c.add(&node{kind: kAlt})
			for i, sub := range list {
				n, err := c.compile(sub, fmt.Sprintf("%s/%s/%d", path, kw, i))
				if err != nil {
					return nil, err
				}
				alt.alts = append(alt.alts, n)
			}
			return alt, nil
		}
	}

	types, err := schemaTypes(s, path)
	if err != nil {
		return nil, err
	}

	_, hasEnum := s.m["enum"]
	_, hasConst := s.m["const"]
	if hasEnum || hasConst {
		for _, k := range s.keys {
			if known[k] && k != "type" && k != "enum" && k != "const" {
				return nil, unsupported(k, path, "together with enum/const")
			}
		}
		var values []any
		if hasConst {
			values = []any{s.m["const"]}
		}
		if hasEnum {
			list, ok := s.m["enum"].([]any)
			if !ok {
				return nil, fmt.Errorf("grammar: enum at %q is not an array", path)
			}
			if hasConst {
				list = slices.DeleteFunc(slices.Clone(list), func(v any) bool { return !jsonEqual(v, values[0]) })
			}
			values = list
		}
		alt := c.add(&node{kind: kAlt})
		for _, v := range values {
			if jt := jsonType(v); types != nil && !types[jt] && !(jt == "integer" && types["number"]) {
				continue
			}
			alt.alts = append(alt.alts, c.add(&node{kind: kLit, lit: encodeCanonical(v)}))
		}
		return alt, nil
	}

	if types == nil {
		// No type: pick the type the other keywords describe, or any value.
		types = map[string]bool{}
		for _, k := range s.keys {
			switch k {
			case "properties", "required", "additionalProperties":
				types["object"] = true
			case "items", "minItems", "maxItems", "prefixItems", "additionalItems":
				types["array"] = true
			case "minLength", "maxLength":
				types["string"] = true
			case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
				types["number"] = true
			}
		}
		if len(types) == 0 {
			return c.anyVal, nil
		}
	}
	alt := c.add(&node{kind: kAlt})
	for _, t := range []string{"object", "array", "string", "number", "integer", "boolean", "null"} {
		if !types[t] {
			continue
		}
		switch t {
		case "object":
			n, err := c.objectNode(s, path)
			if err != nil {
				return nil, err
			}
			alt.alts = append(alt.alts, n)
		case "array":
			n, err := c.arrayNode(s, path)
			if err != nil {
				return nil, err
			}
			alt.alts = append(alt.alts, n)
		case "string":
			n := c.add(&node{kind: kString, maxLen: MaxStringLength})
			var err error
			if n.minLen, err = intKeyword(s, "minLength", path, 0); err != nil {
				return nil, err
			}
			max, err := intKeyword(s, "maxLength", path, -1)
			if err != nil {
				return nil, err
			}
			if max >= 0 && max < n.maxLen {
				n.maxLen = max
			}
			if n.minLen > n.maxLen {
				return nil, unsupported("minLength", path, "larger than the length bound")
			}
			if err := c.stringPattern(n, s, path); err != nil {
				return nil, err
			}
			alt.alts = append(alt.alts, n)
		case "number", "integer":
			if t == "integer" && types["number"] {
				continue
			}
			n := c.add(&node{kind: kNumber, integer: t == "integer"})
			pat, ok, err := numberBounds(s, path, n.integer)
			if err != nil {
				return nil, err
			}
			if ok {
				if n.dfa, err = compileRegex(pat); err != nil {
					return nil, fmt.Errorf("grammar: bounds at %q: %w", path, err)
				}
			}
			alt.alts = append(alt.alts, n)
		case "boolean":
			alt.alts = append(alt.alts, c.lit("true"), c.lit("false"))
		case "null":
			alt.alts = append(alt.alts, c.lit("null"))
		}
	}
	if len(alt.alts) == 1 {
		return alt.alts[0], nil
	}
	return alt, nil
}

// stringPattern sets n.dfa from pattern or format.
func (c *compiler) stringPattern(n *node, s *object, path string) error {
	pv, hasPattern := s.m["pattern"]
	fv, hasFormat := s.m["format"]
	if !hasPattern && !hasFormat {
		return nil
	}
	kw, src := "pattern", ""
	if hasPattern && hasFormat {
		return unsupported("format", path, "together with pattern")
	}
	if hasPattern {
		p, ok := pv.(string)
		if !ok {
			return fmt.Errorf("grammar: pattern at %q is not a string", path)
		}
		src = p
	} else {
		kw = "format"
		f, _ := fv.(string)
		p, ok := formats[f]
		if !ok {
			return unsupported("format", path, fmt.Sprintf("format %q", f))
		}
		src = p
	}
	if n.minLen > 0 {
		return unsupported("minLength", path, "together with "+kw)
	}
	d, err := compileRegex(src)
	if err != nil {
		return unsupported(kw, path, err.Error())
	}
	if int(d.dist[0]) > n.maxLen {
		return fmt.Errorf("grammar: %s at %q has no match within maxLength", kw, path)
	}
	n.dfa = d
	return nil
}

func schemaTypes(s *object, path string) (map[string]bool, error) {
	v, ok := s.m["type"]
	if !ok {
		return nil, nil
	}
	var list []any
	switch v := v.(type) {
	case string:
		list = []any{v}
	case []any:
		list = v
	default:
		return nil, fmt.Errorf("grammar: type at %q is not a string or array", path)
	}
	types := map[string]bool{}
	for _, t := range list {
		name, _ := t.(string)
		switch name {
		case "object", "array", "string", "number", "integer", "boolean", "null":
			types[name] = true
		default:
			return nil, fmt.Errorf("grammar: unknown type %v at %q", t, path)
		}
	}
	return types, nil
}

func intKeyword(s *object, kw, path string, def int) (int, error) {
	v, ok := s.m[kw]
	if !ok {
		return def, nil
	}
	num, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("grammar: %s at %q is not a number", kw, path)
	}
	f, err := num.Float64()
	if err != nil || f < 0 || f != float64(int(f)) {
		return 0, fmt.Errorf("grammar: %s at %q is not a non-negative integer", kw, path)
	}
	return int(min(f, 1<<30)), nil
}

func (c *compiler) objectNode(s *object, path string) (*node, error) {
	n := c.add(&node{kind: kObject})
	var props *object
	if v, ok := s.m["properties"]; ok {
		if props, ok = v.(*object); !ok {
			return nil, fmt.Errorf("grammar: properties at %q is not an object", path)
		}
	}
	required := map[string]bool{}
	if v, ok := s.m["required"]; ok {
		list, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("grammar: required at %q is not an array", path)
		}
		for _, r := range list {
			name, ok := r.(string)
			if !ok {
				return nil, fmt.Errorf("grammar: required at %q has a non-string", path)
			}
			required[name] = true
		}
	}
	addl, hasAddl := s.m["additionalProperties"]
	closed := hasAddl && addl == false
	if props != nil {
		for _, name := range props.keys {
			val, err := c.compile(props.m[name], path+"/properties/"+escapePointer(name))
			if err != nil {
				return nil, err
			}
			if b, ok := props.m[name].(bool); ok && !b {
				if required[name] {
					return nil, fmt.Errorf("grammar: required property %q at %q has schema false", name, path)
				}
				continue
			}
			n.props = append(n.props, prop{key: append(encodeCanonical(name), ':'), val: val, required: required[name]})
		}
	}
	// Required names not listed in properties: any value, after the others.
	reqList, _ := s.m["required"].([]any)
	for _, r := range reqList {
		name := r.(string)
		if props != nil {
			if _, ok := props.m[name]; ok {
				continue
			}
		}
		if closed {
			return nil, fmt.Errorf("grammar: required property %q at %q is excluded by additionalProperties: false", name, path)
		}
		var val *node = c.anyVal
		if hasAddl {
			var err error
			if val, err = c.compile(addl, path+"/additionalProperties"); err != nil {
				return nil, err
			}
		}
		n.props = append(n.props, prop{key: append(encodeCanonical(name), ':'), val: val, required: true})
	}
	if props == nil && len(n.props) == 0 && !closed {
		// A free-form object (a map): keys are any strings.
		n.mapVal = c.anyVal
		if hasAddl && addl != true {
			val, err := c.compile(addl, path+"/additionalProperties")
			if err != nil {
				return nil, err
			}
			n.mapVal = val
		}
	}
	// With properties listed, extra keys are never produced, which satisfies
	// any additionalProperties.
	return n, nil
}

func (c *compiler) arrayNode(s *object, path string) (*node, error) {
	n := c.add(&node{kind: kArray, items: c.anyVal})
	// Tuples: prefixItems (2020-12) then items for the rest, or items as a
	// list (draft-07) then additionalItems for the rest.
	prefixKw, restKw := "prefixItems", "items"
	if v, ok := s.m["items"]; ok {
		if _, isList := v.([]any); isList {
			if _, both := s.m["prefixItems"]; both {
				return nil, unsupported("items", path, "an array form together with prefixItems")
			}
			prefixKw, restKw = "items", "additionalItems"
		}
	}
	noMore := false
	if v, ok := s.m[prefixKw]; ok {
		list, isList := v.([]any)
		if !isList {
			return nil, fmt.Errorf("grammar: %s at %q is not an array", prefixKw, path)
		}
		for i, sub := range list {
			item, err := c.compile(sub, fmt.Sprintf("%s/%s/%d", path, prefixKw, i))
			if err != nil {
				return nil, err
			}
			n.prefix = append(n.prefix, item)
		}
	}
	if v, ok := s.m[restKw]; ok {
		if b, isBool := v.(bool); isBool && !b {
			noMore = true
		} else {
			items, err := c.compile(v, path+"/"+restKw)
			if err != nil {
				return nil, err
			}
			n.items = items
		}
	}
	var err error
	if n.minItems, err = intKeyword(s, "minItems", path, 0); err != nil {
		return nil, err
	}
	if n.maxItems, err = intKeyword(s, "maxItems", path, -1); err != nil {
		return nil, err
	}
	if noMore && (n.maxItems < 0 || n.maxItems > len(n.prefix)) {
		n.maxItems = len(n.prefix)
	}
	if n.maxItems >= 0 && n.minItems > n.maxItems {
		return nil, fmt.Errorf("grammar: minItems > maxItems at %q", path)
	}
	return n, nil
}

// itemAt is the schema of item i (0-based) of an array node.
func (n *node) itemAt(i int) *node {
	if i < len(n.prefix) {
		return n.prefix[i]
	}
	return n.items
}

// ref compiles a reference to the root or to a definition.
func (c *compiler) ref(ref, path string) (*node, error) {
	if n, ok := c.refs[ref]; ok {
		return n, nil
	}
	var target any
	var tpath string
	switch {
	case ref == "#":
		target, tpath = c.doc, ""
	case strings.HasPrefix(ref, "#/$defs/") || strings.HasPrefix(ref, "#/definitions/"):
		parts := strings.SplitN(ref[2:], "/", 2)
		defs, _ := c.doc.(*object)
		if defs == nil {
			return nil, fmt.Errorf("grammar: unresolved $ref %q at %q", ref, path)
		}
		d, _ := defs.m[parts[0]].(*object)
		if d == nil || strings.Contains(parts[1], "/") {
			return nil, unsupported("$ref", path, "only #, #/$defs/<name> and #/definitions/<name> are supported")
		}
		name := unescapePointer(parts[1])
		t, ok := d.m[name]
		if !ok {
			return nil, fmt.Errorf("grammar: unresolved $ref %q at %q", ref, path)
		}
		target, tpath = t, "/"+parts[0]+"/"+parts[1]
	default:
		return nil, unsupported("$ref", path, fmt.Sprintf("reference %q: only #, #/$defs/<name> and #/definitions/<name> are supported", ref))
	}
	// Register before compiling the target, so recursion ends here.
	n := c.add(&node{kind: kAlt})
	c.refs[ref] = n
	t, err := c.compile(target, tpath)
	if err != nil {
		return nil, err
	}
	n.alts = []*node{t}
	return n, nil
}

// finish computes flat, minDepth and the byte costs of every node, and
// returns the most one byte can add to the cost of finishing a document.
func (c *compiler) finish() int32 {
	for _, n := range c.nodes {
		if n.kind == kAlt {
			seen := map[*node]bool{}
			var walk func(*node, bool)
			walk = func(a *node, objOnly bool) {
				if seen[a] {
					return
				}
				seen[a] = true
				if a.kind != kAlt {
					if !objOnly || a.kind == kObject {
						n.flat = append(n.flat, a)
					}
					return
				}
				for _, b := range a.alts {
					walk(b, objOnly || a.objOnly)
				}
			}
			walk(n, false)
		} else {
			n.flat = []*node{n}
		}
		n.minDepth = infDepth
		if n.kind == kObject {
			n.nextReq = make([]int, len(n.props)+1)
			next := len(n.props)
			n.nextReq[next] = next
			for i := len(n.props) - 1; i >= 0; i-- {
				if n.props[i].required {
					next = i
				}
				n.nextReq[i] = next
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for _, n := range c.nodes {
			d := infDepth
			switch n.kind {
			case kLit, kString, kNumber, kRaw:
				d = 1
			case kAlt:
				for _, a := range n.flat {
					d = min(d, a.minDepth)
				}
			case kObject:
				d = 1
				for _, p := range n.props {
					if p.required {
						d = max(d, 1+p.val.minDepth)
					}
				}
			case kArray:
				d = 1
				for i := range n.minItems {
					d = max(d, 1+n.itemAt(i).minDepth)
					if i >= len(n.prefix) {
						break
					}
				}
			case kSeq:
				d = 1
				for _, p := range n.parts {
					if n.minRep > 0 {
						d = max(d, 1+p.minDepth)
					}
				}
				if n.sep != nil && n.minRep > 1 {
					d = max(d, 1+n.sep.minDepth)
				}
			}
			d = min(d, infDepth)
			if d < n.minDepth {
				n.minDepth = d
				changed = true
			}
		}
	}
	return c.costs()
}

// object is a JSON object that keeps its key order.
type object struct {
	keys []string
	m    map[string]any
}

// parseOrdered decodes JSON with numbers as json.Number and objects as
// *object.
func parseOrdered(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := parseValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data")
	}
	return v, nil
}

func parseValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		o := &object{m: map[string]any{}}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k := kt.(string)
			v, err := parseValue(dec)
			if err != nil {
				return nil, err
			}
			if _, dup := o.m[k]; !dup {
				o.keys = append(o.keys, k)
			}
			o.m[k] = v
		}
		_, err := dec.Token()
		return o, err
	case json.Delim('['):
		list := []any{}
		for dec.More() {
			v, err := parseValue(dec)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		_, err := dec.Token()
		return list, err
	}
	return tok, nil
}

// encodeCanonical writes v as compact JSON, keys in their order.
func encodeCanonical(v any) []byte {
	var buf bytes.Buffer
	var enc func(any)
	enc = func(v any) {
		switch v := v.(type) {
		case *object:
			buf.WriteByte('{')
			for i, k := range v.keys {
				if i > 0 {
					buf.WriteByte(',')
				}
				enc(k)
				buf.WriteByte(':')
				enc(v.m[k])
			}
			buf.WriteByte('}')
		case []any:
			buf.WriteByte('[')
			for i, e := range v {
				if i > 0 {
					buf.WriteByte(',')
				}
				enc(e)
			}
			buf.WriteByte(']')
		case json.Number:
			buf.WriteString(v.String())
		default:
			var b bytes.Buffer
			e := json.NewEncoder(&b)
			e.SetEscapeHTML(false)
			_ = e.Encode(v)
			buf.Write(bytes.TrimRight(b.Bytes(), "\n"))
		}
	}
	enc(v)
	return buf.Bytes()
}

func jsonType(v any) string {
	switch v := v.(type) {
	case *object:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case json.Number:
		if isIntegral(v) {
			return "integer"
		}
		return "number"
	case bool:
		return "boolean"
	}
	return "null"
}

func isIntegral(v any) bool {
	n, ok := v.(json.Number)
	if !ok {
		return false
	}
	f, err := strconv.ParseFloat(n.String(), 64)
	return err == nil && f == float64(int64(f))
}

func jsonEqual(a, b any) bool {
	return bytes.Equal(encodeCanonical(a), encodeCanonical(b))
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func unescapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
}
