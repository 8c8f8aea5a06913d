package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Object is a JSON object that remembers the order in which its keys were
// first set, as a Python dict does. Templates see it as a mapping; tojson
// writes its members in that order.
//
// The zero value is an empty object ready to use. An Object is not safe for
// concurrent mutation, but any number of renders may read it at once.
type Object struct {
	keys []string
	vals map[string]any
}

// NewObject returns an object holding the given key/value pairs in order:
// NewObject("role", "user", "content", "hi"). It panics if pairs has an odd
// length or a key is not a string, which is a programming error.
func NewObject(pairs ...any) *Object {
	if len(pairs)%2 != 0 {
		panic("chattemplate.NewObject: odd number of arguments")
	}
	o := &Object{}
	for i := 0; i < len(pairs); i += 2 {
		key, ok := pairs[i].(string)
		if !ok {
			panic(fmt.Sprintf("chattemplate.NewObject: key %v is %T, not string", pairs[i], pairs[i]))
		}
		o.Set(key, pairs[i+1])
	}
	return o
}

// Set stores value under key. A new key goes last; an existing key keeps
// its position. It returns o so calls can be chained.
func (o *Object) Set(key string, value any) *Object {
	if o.vals == nil {
		o.vals = make(map[string]any)
	}
	if _, ok := o.vals[key]; !ok {
		o.keys = append(o.keys, key)
	}
	o.vals[key] = value
	return o
}

// Get returns the value stored under key.
func (o *Object) Get(key string) (any, bool) {
	if o == nil {
		return nil, false
	}
	v, ok := o.vals[key]
	return v, ok
}

// Delete removes key, keeping the order of the others.
func (o *Object) Delete(key string) {
	if _, ok := o.vals[key]; !ok {
		return
	}
	delete(o.vals, key)
	for i, k := range o.keys {
		if k == key {
			o.keys = append(o.keys[:i:i], o.keys[i+1:]...)
			break
		}
	}
}

// Keys returns the keys in order.
func (o *Object) Keys() []string {
	if o == nil {
		return nil
	}
	return append([]string(nil), o.keys...)
}

// Len returns the number of members.
func (o *Object) Len() int {
	if o == nil {
		return 0
	}
	return len(o.keys)
}

// MarshalJSON writes the object compactly, members in order, numbers the
// way Python's json module writes them (a float always has a fraction or
// an exponent, so 1.0 stays a float when Python reads it back).
func (o *Object) MarshalJSON() ([]byte, error) {
	v, err := toValue(o)
	if err != nil {
		return nil, err
	}
	s, err := encodePyJSON(v, pyJSONOptions{itemSep: ",", keySep: ":"})
	if err != nil {
		return nil, err
	}
	return []byte(s), nil
}

// UnmarshalJSON reads a JSON object, keeping member order. Nested objects
// become *Object, arrays []any, numbers int64 or float64 (see DecodeJSON).
func (o *Object) UnmarshalJSON(data []byte) error {
	v, err := DecodeJSON(data)
	if err != nil {
		return err
	}
	obj, ok := v.(*Object)
	if !ok {
		return fmt.Errorf("chattemplate: JSON value is %s, not an object", jsonKind(v))
	}
	*o = *obj
	return nil
}

// DecodeJSON decodes one JSON document into the ordered representation
// templates understand: objects become *Object (key order kept, a repeated
// key keeps its first position and its last value, as in Python), arrays
// []any, strings string, true/false bool, null nil, and numbers int64 when
// written without fraction or exponent and in range, float64 otherwise
// (as Python's json.loads does).
func DecodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, fmt.Errorf("chattemplate: decode JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("chattemplate: decode JSON: trailing data after the document")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := &Object{}
			for dec.More() {
				keyTok, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, ok := keyTok.(string)
				if !ok {
					return nil, fmt.Errorf("object key %v is not a string", keyTok)
				}
				val, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				obj.Set(key, val)
			}
			if _, err := dec.Token(); err != nil { // '}'
				return nil, err
			}
			return obj, nil
		case '[':
			list := []any{}
			for dec.More() {
				val, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				list = append(list, val)
			}
			if _, err := dec.Token(); err != nil { // ']'
				return nil, err
			}
			return list, nil
		}
		return nil, fmt.Errorf("unexpected delimiter %v", t)
	case json.Number:
		return parseNumber(string(t))
	default: // string, bool, nil
		return t, nil
	}
}

// parseNumber converts a JSON number literal the way Python's json.loads
// does: an integer literal is an int, anything else a float (possibly
// infinite when out of range).
func parseNumber(lit string) (any, error) {
	if !strings.ContainsAny(lit, ".eE") {
		if n, err := strconv.ParseInt(lit, 10, 64); err == nil {
			return n, nil
		}
		// Python ints are unbounded; beyond int64 we fall back to float.
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil && !math.IsInf(f, 0) {
		return nil, fmt.Errorf("number %q: %w", lit, err)
	}
	return f, nil
}

// Kind names the JSON kind of a value decoded by DecodeJSON, as error
// messages say it ("a string", "an object", "null", ...).
func Kind(v any) string { return jsonKind(v) }

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case []any:
		return "an array"
	case *Object:
		return "an object"
	default:
		return "a number"
	}
}
