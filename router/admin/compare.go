package admin

import (
	"bytes"
	"encoding/json"
	"reflect"
)

// Compare is bench/accuracy's "compare": absent, null or true — the
// model's float original when oQ recorded one (quant.SourceKey) and that
// very model is on the node; a model's name — that model; "" or false —
// no comparison.
type Compare struct {
	Name string // the model named
	Off  bool   // "" or false: none
}

// IsZero is the default (omitted when marshalled: omitzero).
func (c Compare) IsZero() bool { return c == Compare{} }

// UnmarshalJSON takes a string, a boolean or null.
func (c *Compare) UnmarshalJSON(b []byte) error {
	switch {
	case bytes.Equal(b, []byte("null")), bytes.Equal(b, []byte("true")):
		*c = Compare{}
	case bytes.Equal(b, []byte("false")):
		*c = Compare{Off: true}
	default:
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return &json.UnmarshalTypeError{Value: string(b), Type: jsonCompareType}
		}
		*c = Compare{Name: s, Off: s == ""}
	}
	return nil
}

// MarshalJSON writes the name, false when off, true for the default.
func (c Compare) MarshalJSON() ([]byte, error) {
	switch {
	case c.Name != "":
		return json.Marshal(c.Name)
	case c.Off:
		return []byte("false"), nil
	}
	return []byte("true"), nil
}

// String is the model named, or what the default and off mean.
func (c Compare) String() string {
	switch {
	case c.Name != "":
		return c.Name
	case c.Off:
		return "none"
	}
	return "the recorded source"
}

var jsonCompareType = reflect.TypeFor[Compare]()
