// Package requestid carries the id of an HTTP request in its context, so
// that the middleware that assigns it and the handlers that log it and
// pass it to the engine agree without knowing each other.
package requestid

import (
	"context"
	"crypto/rand"
	"encoding/base32"
)

type key struct{}

// With returns ctx carrying id.
func With(ctx context.Context, id string) context.Context { return context.WithValue(ctx, key{}, id) }

// From returns the id in ctx, or "".
func From(ctx context.Context) string {
	id, _ := ctx.Value(key{}).(string)
	return id
}

var enc = base32.StdEncoding.WithPadding(base32.NoPadding)

// New returns a random id of 26 lowercase letters and digits.
func New() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return lower(enc.EncodeToString(b[:]))
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// Valid reports whether a client-supplied id is safe to adopt: 1 to 128
// visible ASCII characters.
func Valid(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}
