package openai

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
	"unicode/utf8"
)

// MaxBytesError reports whether err comes from a body over the limit set by
// http.MaxBytesReader, and the limit.
func MaxBytesError(err error) (int64, bool) {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return mb.Limit, true
	}
	return 0, false
}

// readBody reads the whole request body (already limited by the router).
func readBody(r *http.Request) ([]byte, *Error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		if limit, ok := MaxBytesError(err); ok {
			return nil, TooLarge(limit)
		}
		return nil, &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Message: "cannot read the request body: " + err.Error()}
	}
	return body, nil
}

// decodeBody reads the request body as one JSON object into v. Unknown
// fields are ignored, as OpenAI does; a value of the wrong type is a 400
// naming the field.
func decodeBody(r *http.Request, v any) *Error {
	body, e := readBody(r)
	if e != nil {
		return e
	}
	return decodeJSON(body, v)
}

// decodeUTF8Body is decodeBody for routes that also refuse a body that
// is not valid UTF-8 (which encoding/json would quietly replace), because
// its text goes to a model as it is.
func decodeUTF8Body(r *http.Request, v any) *Error {
	body, e := readBody(r)
	if e != nil {
		return e
	}
	if !utf8.Valid(body) {
		return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Code: "invalid_json",
			Message: "The request body is not valid UTF-8."}
	}
	return decodeJSON(body, v)
}

// decodeJSON decodes body, which must hold exactly one JSON object, into v.
func decodeJSON(body []byte, v any) *Error {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Code: "invalid_json",
			Message: "The request body is empty; expected a JSON object."}
	}
	if trimmed[0] != '{' {
		if !json.Valid(trimmed) {
			return syntaxError(trimmed)
		}
		return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Code: "invalid_json",
			Message: fmt.Sprintf("The request body must be a JSON object, but it is %s.", jsonkind.Of(trimmed))}
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			// Fields of embedded structs come prefixed with the Go type.
			param := strings.TrimPrefix(te.Field, "commonRequest.")
			if param == "" {
				param = "body"
			}
			return invalidType(param, goTypeName(te.Type), jsonkind.Described(te.Value))
		}
		if json.Valid(trimmed) {
			return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Code: "invalid_value", Message: "Invalid request body: " + err.Error()}
		}
		return syntaxError(trimmed)
	}
	if dec.More() || dec.InputOffset() != int64(len(trimmed)) {
		return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Code: "invalid_json",
			Message: "The request body holds data after its JSON object."}
	}
	return nil
}

func syntaxError(body []byte) *Error {
	var v any
	err := json.Unmarshal(body, &v)
	msg := "We could not parse the JSON body of your request."
	var se *json.SyntaxError
	if errors.As(err, &se) {
		msg += fmt.Sprintf(" (%s, at byte %d)", se.Error(), se.Offset)
	} else if err != nil {
		msg += " (" + err.Error() + ")"
	}
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Code: "invalid_json", Message: msg}
}

// goTypeName names the JSON a Go type accepts, for error messages.
func goTypeName(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another type"
}
