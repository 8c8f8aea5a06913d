package openai

import (
	"encoding/json"
	"net/http"

	"fusion/engine/chattemplate"
)

// The helpers below let other route groups (router/admin) read bodies and
// messages exactly as the OpenAI routes do and answer in their error shape.

// DecodeBody reads r's JSON body into v; the error is a 400 or 413 *Error.
func DecodeBody(r *http.Request, v any) error {
	if e := decodeBody(r, v); e != nil {
		return e
	}
	return nil
}

// ParseMessages checks a chat message list as /v1/chat/completions does.
func ParseMessages(raw json.RawMessage) ([]*chattemplate.Object, error) {
	msgs, e := parseMessages(raw)
	if e != nil {
		return nil, e
	}
	return msgs, nil
}

// ParseTools checks a tool list as /v1/chat/completions does (nil when
// raw is absent or null).
func ParseTools(raw json.RawMessage) ([]*chattemplate.Object, error) {
	tools, e := parseToolList(raw)
	if e != nil {
		return nil, e
	}
	return tools, nil
}

// MissingParam is the 400 of a required field left out.
func MissingParam(param string) *Error { return missingParam(param) }

// WriteJSON answers v with status, encoded as every OpenAI route does.
func WriteJSON(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }
