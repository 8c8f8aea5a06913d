package admin

import (
	"context"
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"

	"fusion/router/cloud"
	"fusion/router/openai"
)

// Cloud is what GET and PUT /admin/api/cloud need: the cloud upstreams
// (backend_override "cloud", cloud_fallback) every node uses.
type Cloud interface {
	// CloudConfig is the configuration in force: the one stored through
	// PutCloudConfig (source "cluster" or "node") once there is one, else
	// this node's --cloud-config file ("file"), else none ("none").
	CloudConfig() (cfg cloud.Config, source string)
	// PutCloudConfig stores doc (checked) for every node; it returns
	// once the write is committed.
	PutCloudConfig(ctx context.Context, doc []byte) error
	// CloudKeys reports, per upstream, whether this node can read its
	// key (nil) or why not. Never the key.
	CloudKeys() map[string]error
}

// CloudDocument is the answer of GET (and PUT) /admin/api/cloud: the
// configuration (which names where keys are read, never a key), its
// source, and for each upstream whether this node can read its key.
type CloudDocument struct {
	Upstreams []CloudUpstream `json:"upstreams"`
	Source    string          `json:"source"`
	Node      string          `json:"node"` // the node the key states are of
}

// CloudUpstream is an upstream as GET shows it.
type CloudUpstream struct {
	cloud.Upstream
	KeySource string `json:"key_source"` // env:NAME, file:PATH or none
	// KeyReadable says whether this node can read the key; KeyError why
	// not (the variable or file, never a value).
	KeyReadable bool   `json:"key_readable"`
	KeyError    string `json:"key_error,omitempty"`
}

func (h *Handler) mountCloud(r chi.Router) {
	if h.cfg.Cloud == nil {
		return
	}
	r.Get("/admin/api/cloud", h.cloudGet)
	r.Put("/admin/api/cloud", h.cloudPut)
}

func (h *Handler) cloudDocument() CloudDocument {
	cfg, source := h.cfg.Cloud.CloudConfig()
	keys := h.cfg.Cloud.CloudKeys()
	doc := CloudDocument{Upstreams: []CloudUpstream{}, Source: source, Node: h.cfg.Self}
	for _, u := range cfg.Upstreams {
		cu := CloudUpstream{Upstream: u, KeySource: u.KeySource(), KeyReadable: true}
		if err := keys[u.Name]; err != nil {
			cu.KeyReadable, cu.KeyError = false, err.Error()
		}
		doc.Upstreams = append(doc.Upstreams, cu)
	}
	return doc
}

func (h *Handler) cloudGet(w http.ResponseWriter, _ *http.Request) {
	openai.WriteJSON(w, http.StatusOK, h.cloudDocument())
}

// cloudPut replaces the configuration: checked here (a 400 naming the
// field; a key in the document is refused), then written for every node.
func (h *Handler) cloudPut(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, cloud.MaxConfigBytes)
	body, e := readBody(r)
	if e != nil {
		openai.WriteError(w, e)
		return
	}
	if body == nil {
		openai.WriteError(w, openai.MissingParam("upstreams"))
		return
	}
	cfg, err := cloud.Parse(body)
	var ce *cloud.ConfigError
	if errors.As(err, &ce) {
		openai.WriteError(w, openai.InvalidRequest(ce.Field, "Invalid cloud configuration: %s.", ce.Error()))
		return
	}
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	if err := h.cfg.Cloud.PutCloudConfig(r.Context(), body); err != nil {
		openai.WriteError(w, &openai.Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "cloud_config_not_written",
			Message: "The cloud configuration was not written: " + err.Error(), RetryAfter: 1})
		return
	}
	if h.cfg.Logger != nil {
		names := make([]string, len(cfg.Upstreams))
		for i, u := range cfg.Upstreams {
			names[i] = u.Name
		}
		h.cfg.Logger.Info("cloud configuration replaced", "upstreams", names)
	}
	openai.WriteJSON(w, http.StatusOK, h.cloudDocument())
}
