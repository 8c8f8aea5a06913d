package admin

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"fusion/router/openai"
)

// placeholders are the contract's model-hub routes, which the model-hub
// work fills: until then they answer 501, not 404, so a client can tell
// "not built yet" from "no such route".
var placeholders = []struct{ method, path, what string }{
	{http.MethodGet, "/admin/api/hf/models", "Searching Hugging Face models"},
	{http.MethodPost, "/admin/api/hf/download", "Downloading models"},
	{http.MethodPost, "/admin/api/bench/run", "The throughput benchmark"},
	{http.MethodPost, "/admin/api/bench/accuracy", "The accuracy benchmark"},
	{http.MethodPost, "/admin/api/oq/start", "Online quantization"},
}

// mountPlaceholders mounts the 501s; withHub leaves out the Hugging Face
// routes, withOQ the quantization route and withBench the benchmark
// routes, which the node serves.
func mountPlaceholders(r chi.Router, withHub, withOQ, withBench bool) {
	for _, p := range placeholders {
		if withHub && strings.HasPrefix(p.path, "/admin/api/hf/") || withOQ && strings.HasPrefix(p.path, "/admin/api/oq/") ||
			withBench && strings.HasPrefix(p.path, "/admin/api/bench/") {
			continue
		}
		r.Method(p.method, p.path, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			openai.WriteError(w, &openai.Error{Status: http.StatusNotImplemented, Type: "not_implemented", Code: "not_implemented",
				Message: p.what + " (" + p.method + " " + p.path + ") is not available on this server yet: it comes with the model hub."})
		}))
	}
}
