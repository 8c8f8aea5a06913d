package router

import (
	"context"
	"io"
	"net/http"
	"testing"
)

// TestSetHandler: a server bound before its handler exists serves the
// handler set later.
func TestSetHandler(t *testing.T) {
	s, err := Listen("127.0.0.1:0", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.SetHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "late") }))
	s.Serve()
	defer s.Drain(context.Background())
	resp, err := http.Get("http://" + s.Addr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); string(b) != "late" {
		t.Fatalf("answer %q", b)
	}
}
