package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"fusion/router/jsonkind"
	"io"
	"net/http"
	"reflect"
	"strings"

	"fusion/engine/chattemplate"
)

// readBody reads the whole request body (already limited by the router).
func readBody(r *http.Request) ([]byte, *Error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return nil, TooLarge(mb.Limit)
		}
		return nil, invalid("cannot read the request body: %v", err)
	}
	return body, nil
}

// decodeJSON decodes body, which must hold exactly one JSON object, into v.
// Unknown fields are ignored; a value of the wrong type is a 400 naming
// the field.
func decodeJSON(body []byte, v any) *Error {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return invalid("The request body is empty; expected a JSON object.")
	}
	if !json.Valid(trimmed) {
		var x any
		err := json.Unmarshal(trimmed, &x)
		return invalid("The request body is not valid JSON: %v", err)
	}
	if trimmed[0] != '{' {
		return invalid("The request body must be a JSON object, but it is %s.", jsonkind.Of(trimmed))
	}
	if err := json.Unmarshal(trimmed, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			param := te.Field
			if param == "" {
				param = "body"
			}
			return invalidType(param, goTypeName(te.Type), jsonkind.Described(te.Value))
		}
		return invalid("Invalid request body: %v", err)
	}
	return nil
}

// goTypeName names the JSON a Go type accepts.
func goTypeName(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a valid boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a valid integer"
	case reflect.Float32, reflect.Float64:
		return "a valid number"
	case reflect.String:
		return "a valid string"
	case reflect.Slice, reflect.Array:
		return "a valid list"
	case reflect.Map, reflect.Struct:
		return "a valid dictionary"
	}
	return "another type"
}

func isNull(raw json.RawMessage) bool {
	t := strings.TrimSpace(string(raw))
	return t == "" || t == "null"
}

// decodeRaw decodes a raw field into ordered values for the chat template.
func decodeRaw(raw json.RawMessage, param, want string) (any, *Error) {
	v, err := chattemplate.DecodeJSON(raw)
	if err != nil {
		return nil, invalidType(param, want, jsonkind.Of(raw))
	}
	return v, nil
}

// field reads obj[key]; absent and null are both (nil, false).
func field(obj *chattemplate.Object, key string) (any, bool) {
	v, ok := obj.Get(key)
	if !ok || v == nil {
		return nil, false
	}
	return v, true
}

// stringField reads a required string field.
func stringField(obj *chattemplate.Object, key, param string) (string, *Error) {
	v, ok := field(obj, key)
	if !ok {
		return "", missing(param + "." + key)
	}
	s, ok := v.(string)
	if !ok {
		return "", invalidType(param+"."+key, "a valid string", jsonkind.OfValue(v))
	}
	return s, nil
}

func at(param string, i int) string { return fmt.Sprintf("%s.%d", param, i) }
