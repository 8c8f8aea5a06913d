package admin

import (
	"encoding/json"
	"net/http"
	"sort"
	"strconv"

	"github.com/go-chi/chi/v5"

	"fusion/router/openai"
)

// GlobalSettingsKey is the settings key of the replicated overrides of
// the global configuration (a JSON object of key → string value).
const GlobalSettingsKey = "admin/global"

// Global is the node's configuration as the global-settings routes see
// it (node implements it).
type Global interface {
	// Effective lists every setting with its value in force and where it
	// came from; secrets are "set" or "unset", never their value.
	Effective() []GlobalSetting
	// Check validates value for key as its flag would; an unknown key or
	// a bad value is an error, and live says whether a change applies
	// without a restart.
	Check(key, value string) (live bool, err error)
}

// GlobalSetting is one setting of GET /admin/api/global-settings.
type GlobalSetting struct {
	Key   string `json:"key"`
	Value string `json:"value"`
	// Source: default, flag, env, file, config (set by the embedding
	// program) or cluster (a replicated override). A replicated override
	// replaces a default (live, or at the next start); a node's own flag,
	// environment variable or config file key wins over it.
	Source string `json:"source"`
	// ClusterValue is the replicated override that this node's own flag,
	// environment variable or config file key shadows.
	ClusterValue string `json:"cluster_value,omitempty"`
	// Live says whether a change applies without a restart.
	Live bool `json:"live"`
	// RestartRequired: a replicated override differs from what this
	// process runs with, and takes effect at its next start.
	RestartRequired bool `json:"restart_required,omitempty"`
	Secret          bool `json:"secret,omitempty"`
}

// GlobalSettings is the answer of GET /admin/api/global-settings.
type GlobalSettings struct {
	Node     string          `json:"node"`
	Settings []GlobalSetting `json:"settings"`
}

// GlobalChange is the answer of POST /admin/api/global-settings.
type GlobalChange struct {
	Status          string   `json:"status"` // "ok"
	Applied         []string `json:"applied"`
	RestartRequired []string `json:"restart_required"`
}

// Limits of a global-settings change.
const (
	maxGlobalBody  = 64 << 10 // body bytes
	maxGlobalValue = 4096     // one value's bytes
)

func (h *Handler) mountGlobal(r chi.Router) {
	if h.cfg.Global == nil {
		return
	}
	r.Get("/admin/api/global-settings", h.getGlobal)
	r.Post("/admin/api/global-settings", h.postGlobal)
}

func (h *Handler) getGlobal(w http.ResponseWriter, r *http.Request) {
	if h.forwarded(w, r, nil) {
		return
	}
	s := h.cfg.Global.Effective()
	if s == nil {
		s = []GlobalSetting{}
	}
	openai.WriteJSON(w, http.StatusOK, GlobalSettings{Node: h.cfg.Self, Settings: s})
}

// postGlobal validates a change (a JSON object of key → value; strings,
// numbers and booleans are taken as a flag's text), merges it into the
// replicated overrides and answers which keys applied live and which need
// a restart. Every node applies the overrides when the write reaches it.
func (h *Handler) postGlobal(w http.ResponseWriter, r *http.Request) {
	body, e := readBody(r)
	if e != nil {
		openai.WriteError(w, e)
		return
	}
	if len(body) > maxGlobalBody {
		openai.WriteError(w, openai.InvalidRequest("", "The body is %d bytes; at most %d.", len(body), maxGlobalBody))
		return
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil || raw == nil {
		openai.WriteError(w, openai.InvalidRequest("", "The body must be a JSON object of settings (key: value)."))
		return
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	change := GlobalChange{Status: "ok", Applied: []string{}, RestartRequired: []string{}}
	values := map[string]string{}
	for _, k := range keys {
		v, ok := scalarText(raw[k])
		if !ok || len(v) > maxGlobalValue {
			openai.WriteError(w, openai.InvalidRequest(k, "Invalid '%s': a string, number or boolean of at most %d bytes.", k, maxGlobalValue))
			return
		}
		live, err := h.cfg.Global.Check(k, v)
		if err != nil {
			openai.WriteError(w, openai.InvalidRequest(k, "Invalid '%s': %v.", k, err))
			return
		}
		values[k] = v
		if live {
			change.Applied = append(change.Applied, k)
		} else {
			change.RestartRequired = append(change.RestartRequired, k)
		}
	}
	if h.cfg.Store == nil {
		openai.WriteError(w, &openai.Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "settings_unavailable", Message: "This node cannot store settings."})
		return
	}
	merged := map[string]string{}
	if b, ok := h.cfg.Store.Setting(GlobalSettingsKey); ok {
		_ = json.Unmarshal(b, &merged)
	}
	for k, v := range values {
		merged[k] = v
	}
	b, _ := json.Marshal(merged)
	if err := h.cfg.Store.PutSetting(r.Context(), GlobalSettingsKey, b); err != nil {
		openai.WriteError(w, &openai.Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "settings_not_written", Message: "The settings were not written: " + err.Error()})
		return
	}
	openai.WriteJSON(w, http.StatusOK, change)
}

// scalarText is a JSON scalar as a flag's text.
func scalarText(raw json.RawMessage) (string, bool) {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return "", false
	}
	switch t := v.(type) {
	case string:
		return t, true
	case bool:
		return strconv.FormatBool(t), true
	case float64:
		return string(raw), true
	}
	return "", false
}

// DecodeGlobalOverrides reads the stored overrides (empty when they do
// not parse).
func DecodeGlobalOverrides(b []byte) map[string]string {
	m := map[string]string{}
	_ = json.Unmarshal(b, &m)
	return m
}
