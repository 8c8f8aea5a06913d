// Package jsonkind names JSON values in words for the error messages of the
// API dialects ("an object", "the number 1.5").
package jsonkind

import (
	"bytes"
	"strings"

	"fusion/engine/chattemplate"
)

// Of names the kind of a valid JSON document.
func Of(doc []byte) string {
	doc = bytes.TrimSpace(doc)
	if len(doc) == 0 {
		return "empty"
	}
	switch doc[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// OfValue names the kind of a value decoded by chattemplate.DecodeJSON.
func OfValue(v any) string { return chattemplate.Kind(v) }

// Described turns encoding/json's description of a value in an
// UnmarshalTypeError ("string", "number 1.5", "array") into words.
func Described(v string) string {
	switch {
	case v == "string":
		return "a string"
	case v == "bool":
		return "a boolean"
	case v == "array":
		return "an array"
	case v == "object":
		return "an object"
	case v == "number":
		return "a number"
	case strings.HasPrefix(v, "number "):
		return "the number " + strings.TrimPrefix(v, "number ")
	}
	return v
}
