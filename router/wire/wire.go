// Package wire holds the JSON encoding every API dialect shares.
package wire

import (
	"bytes"
	"encoding/json"
)

// Marshal encodes v like encoding/json but without HTML escaping (the
// official APIs send "<" and "&" as they are) and without a trailing
// newline.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
