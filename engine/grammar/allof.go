package grammar

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// allOf is merged into one schema where that is exact: types intersect,
// properties and required unite (a property in several parts takes the
// allOf of its schemas), length/item/number bounds take the stricter
// value, enums intersect, additionalProperties: false keeps only its own
// properties, and one anyOf/oneOf among the parts is distributed over the
// merge. $refs among the parts are inlined one level. Anything else that
// differs between parts (two patterns, two formats, ...) is refused,
// naming allOf.

var errAllOfLoop = errors.New("grammar: allOf loop")

// errNoInstance: merged parts that no value satisfies.
var errNoInstance = errors.New("grammar: no instance")

var stricterMin = map[string]bool{"minLength": true, "minItems": true, "minimum": true, "exclusiveMinimum": true}
var stricterMax = map[string]bool{"maxLength": true, "maxItems": true, "maximum": true, "exclusiveMaximum": true}

// mergeAllOf returns the schema equal to s with its allOf merged in.
func (c *compiler) mergeAllOf(s *object, path string) (out any, err error) {
	if c.merging > MaxDepth {
		return nil, errAllOfLoop
	}
	c.merging++
	defer func() { c.merging-- }()
	if c.merging == 1 {
		// Report a loop once, where the outermost allOf is.
		defer func() {
			if errors.Is(err, errAllOfLoop) {
				out, err = nil, unsupported("allOf", path, "recursion through allOf")
			}
		}()
	}
	list, ok := s.m["allOf"].([]any)
	if !ok || len(list) == 0 {
		return nil, fmt.Errorf("grammar: allOf at %q is not a non-empty array", path)
	}
	rest := &object{m: map[string]any{}}
	for _, k := range s.keys {
		if k != "allOf" {
			rest.keys = append(rest.keys, k)
			rest.m[k] = s.m[k]
		}
	}
	parts := []any{rest}
	for i, p := range list {
		p, err = c.resolvePart(p, fmt.Sprintf("%s/allOf/%d", path, i))
		if err != nil {
			return nil, err
		}
		parts = append(parts, p)
	}
	return c.merge(parts, path)
}

// resolvePart inlines a part that is only a $ref (with annotations) and
// merges a nested allOf.
func (c *compiler) resolvePart(p any, path string) (any, error) {
	o, ok := p.(*object)
	if !ok {
		return p, nil
	}
	if ref, ok := o.m["$ref"].(string); ok {
		target, err := c.lookup(ref, path)
		if err != nil {
			return nil, err
		}
		merged := &object{m: map[string]any{}}
		for _, k := range o.keys {
			if k != "$ref" {
				merged.keys = append(merged.keys, k)
				merged.m[k] = o.m[k]
			}
		}
		return c.merge([]any{merged, target}, path)
	}
	if _, ok := o.m["allOf"]; ok {
		return c.mergeAllOf(o, path)
	}
	return o, nil
}

// lookup finds the schema a local $ref points to.
func (c *compiler) lookup(ref, path string) (any, error) {
	if ref == "#" {
		return c.doc, nil
	}
	if strings.HasPrefix(ref, "#/$defs/") || strings.HasPrefix(ref, "#/definitions/") {
		parts := strings.SplitN(ref[2:], "/", 2)
		if root, ok := c.doc.(*object); ok {
			if defs, ok := root.m[parts[0]].(*object); ok {
				if t, ok := defs.m[unescapePointer(parts[1])]; ok {
					return t, nil
				}
			}
		}
		return nil, fmt.Errorf("grammar: unresolved $ref %q at %q", ref, path)
	}
	return nil, unsupported("$ref", path, fmt.Sprintf("reference %q inside allOf", ref))
}

func (c *compiler) merge(parts []any, path string) (any, error) {
	out := &object{m: map[string]any{}}
	var alts [][]any // anyOf/oneOf lists to distribute
	var closed [][]string
	for i, p := range parts {
		switch p := p.(type) {
		case bool:
			if !p {
				return false, nil
			}
			continue
		case *object:
			if i > 0 {
				if r, err := c.resolvePart(p, path); err != nil {
					return nil, err
				} else if ro, ok := r.(*object); ok {
					p = ro
				} else if r == false {
					return false, nil
				} else {
					continue
				}
			}
			if ap, ok := p.m["additionalProperties"]; ok && ap == false {
				var names []string
				if props, ok := p.m["properties"].(*object); ok {
					names = props.keys
				}
				closed = append(closed, names)
			}
			for _, k := range p.keys {
				v := p.m[k]
				if k == "anyOf" || k == "oneOf" {
					list, ok := v.([]any)
					if !ok {
						return nil, fmt.Errorf("grammar: %s at %q is not an array", k, path)
					}
					alts = append(alts, list)
					continue
				}
				old, seen := out.m[k]
				if !seen {
					out.keys = append(out.keys, k)
					out.m[k] = v
					continue
				}
				merged, err := mergeKeyword(k, old, v, path)
				if errors.Is(err, errNoInstance) {
					return false, nil
				}
				if err != nil {
					return nil, err
				}
				out.m[k] = merged
			}
		default:
			return nil, fmt.Errorf("grammar: allOf part at %q is not a schema", path)
		}
	}
	if len(closed) > 0 {
		if err := closeProperties(out, closed, path); err != nil {
			return nil, err
		}
	}
	switch len(alts) {
	case 0:
		return out, nil
	case 1:
		var branches []any
		for _, a := range alts[0] {
			b, err := c.merge([]any{out, a}, path)
			if err != nil {
				return nil, err
			}
			if b != false {
				branches = append(branches, b)
			}
		}
		if len(branches) == 0 {
			return false, nil
		}
		return &object{keys: []string{"anyOf"}, m: map[string]any{"anyOf": branches}}, nil
	}
	return nil, unsupported("allOf", path, "more than one anyOf/oneOf among its parts")
}

// closeProperties applies additionalProperties: false of some parts: only
// properties every closed part lists remain.
func closeProperties(out *object, closed [][]string, path string) error {
	allowed := func(name string) bool {
		for _, names := range closed {
			if !slices.Contains(names, name) {
				return false
			}
		}
		return true
	}
	if props, ok := out.m["properties"].(*object); ok {
		kept := &object{m: map[string]any{}}
		for _, k := range props.keys {
			if allowed(k) {
				kept.keys = append(kept.keys, k)
				kept.m[k] = props.m[k]
			}
		}
		out.m["properties"] = kept
	}
	if req, ok := out.m["required"].([]any); ok {
		for _, r := range req {
			if name, _ := r.(string); !allowed(name) {
				return fmt.Errorf("grammar: allOf at %q requires %q, which additionalProperties: false excludes", path, name)
			}
		}
	}
	out.m["additionalProperties"] = false
	return nil
}

func mergeKeyword(k string, a, b any, path string) (any, error) {
	if annotations[k] {
		return a, nil
	}
	switch {
	case k == "type":
		ta, tb := typeList(a), typeList(b)
		var both []any
		for _, t := range ta {
			if slices.Contains(tb, t) {
				both = append(both, t)
			} else if t == "number" && slices.Contains(tb, "integer") {
				both = append(both, "integer")
			} else if t == "integer" && slices.Contains(tb, "number") {
				both = append(both, "integer")
			}
		}
		if len(both) == 0 {
			return nil, errNoInstance
		}
		return both, nil
	case k == "properties":
		pa, oka := a.(*object)
		pb, okb := b.(*object)
		if !oka || !okb {
			return nil, fmt.Errorf("grammar: properties at %q is not an object", path)
		}
		out := &object{keys: slices.Clone(pa.keys), m: map[string]any{}}
		for k, v := range pa.m {
			out.m[k] = v
		}
		for _, name := range pb.keys {
			if old, ok := out.m[name]; ok {
				out.m[name] = &object{keys: []string{"allOf"}, m: map[string]any{"allOf": []any{old, pb.m[name]}}}
				continue
			}
			out.keys = append(out.keys, name)
			out.m[name] = pb.m[name]
		}
		return out, nil
	case k == "required":
		la, _ := a.([]any)
		lb, _ := b.([]any)
		out := slices.Clone(la)
		for _, r := range lb {
			if !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
		return out, nil
	case k == "items" || k == "additionalProperties":
		if ba, ok := a.(bool); ok && !ba {
			return false, nil
		}
		if bb, ok := b.(bool); ok && !bb {
			return false, nil
		}
		if _, isList := a.([]any); isList {
			break
		}
		if _, isList := b.([]any); isList {
			break
		}
		return &object{keys: []string{"allOf"}, m: map[string]any{"allOf": []any{a, b}}}, nil
	case stricterMin[k] || stricterMax[k]:
		fa, fb := numberOf(a), numberOf(b)
		if (fa > fb) == stricterMin[k] {
			return a, nil
		}
		return b, nil
	case k == "enum":
		la, _ := a.([]any)
		lb, _ := b.([]any)
		var out []any
		for _, v := range la {
			if slices.ContainsFunc(lb, func(w any) bool { return jsonEqual(v, w) }) {
				out = append(out, v)
			}
		}
		return out, nil
	}
	if jsonEqual(a, b) {
		return a, nil
	}
	return nil, unsupported("allOf", path, fmt.Sprintf("cannot merge two different %q", k))
}

func typeList(v any) []any {
	if l, ok := v.([]any); ok {
		return l
	}
	return []any{v}
}

func numberOf(v any) float64 {
	var f float64
	if n, ok := v.(interface{ Float64() (float64, error) }); ok {
		f, _ = n.Float64()
	}
	return f
}
