package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"time"

	"github.com/go-chi/chi/v5"

	"fusion/engine/runner"
	"fusion/router/openai"
)

// Models is what the model routes need of the engine pool (the runner
// implements it).
type Models interface {
	Load(ctx context.Context, name string) error
	Unload(ctx context.Context, name string) error
	List() []runner.ModelStatus
	// Details describes every model of the models dir from its files.
	Details() []runner.ModelDetails
}

// ModelEntry is one model of GET /admin/api/models. Across a cluster,
// Nodes are the nodes with the model on disk and LoadedOn those with it
// in memory; the pool figures (state, bytes, kv_bytes, active,
// last_used) are summed or taken from the node answering first.
type ModelEntry struct {
	ID            string        `json:"id"`
	Format        string        `json:"format"`
	Kind          string        `json:"kind"`
	Size          int64         `json:"size"` // bytes of its files
	Quantization  string        `json:"quantization"`
	Architecture  string        `json:"architecture"`
	ModelType     string        `json:"model_type,omitempty"`
	ContextLength int           `json:"context_length"`
	Compatible    bool          `json:"compatible"`
	Reason        string        `json:"reason,omitempty"` // why not compatible
	Backend       string        `json:"backend"`
	Nodes         []string      `json:"nodes"`
	LoadedOn      []string      `json:"loaded_on"`
	State         string        `json:"state"` // unloaded, loading, ready (requests in flight), idle
	Bytes         int64         `json:"bytes"`
	KVBytes       int64         `json:"kv_bytes"`
	Pinned        bool          `json:"pinned"`
	Active        int           `json:"active"`
	LastUsed      *int64        `json:"last_used"` // unix seconds; null if never used
	Settings      ModelSettings `json:"settings"`
}

// ModelList is the answer of GET /admin/api/models.
type ModelList struct {
	Object string       `json:"object"` // "list"
	Data   []ModelEntry `json:"data"`
	// Unreachable lists the nodes that did not answer, with why.
	Unreachable map[string]string `json:"unreachable,omitempty"`
}

// ModelAction is the answer of POST /admin/api/models/{id}/load|unload.
type ModelAction struct {
	Status string     `json:"status"` // "ok"
	Model  ModelEntry `json:"model"`
	// Nodes are where the action ran.
	Nodes []string `json:"nodes"`
}

// SettingsAnswer is the answer of PUT /admin/api/models/{id}/settings.
type SettingsAnswer struct {
	Status   string        `json:"status"` // "ok"
	Model    string        `json:"model"`
	Settings ModelSettings `json:"settings"`
}

func (h *Handler) mountModels(r chi.Router) {
	if h.models == nil {
		return
	}
	r.Get("/admin/api/models", h.listModels)
	r.Post("/admin/api/models/{id}/load", h.modelAction(Models.Load, "load"))
	r.Post("/admin/api/models/{id}/unload", h.modelAction(Models.Unload, "unload"))
	r.Put("/admin/api/models/{id}/settings", h.putSettings)
}

// localModels lists this node's models.
func (h *Handler) localModels() []ModelEntry {
	status := map[string]runner.ModelStatus{}
	for _, s := range h.models.List() {
		status[s.ID] = s
	}
	settings := h.modelSettings()
	var out []ModelEntry
	for _, d := range h.models.Details() {
		s := status[d.ID]
		e := ModelEntry{ID: d.ID, Format: d.Format, Kind: d.Kind, Size: d.Bytes, Quantization: d.Quantization, Architecture: d.Architecture,
			ModelType: d.ModelType, ContextLength: d.ContextLength, Compatible: d.Compatible, Reason: d.Reason, Backend: d.Backend,
			Nodes: []string{h.cfg.Self}, LoadedOn: []string{},
			State: string(s.State), Bytes: s.Bytes, KVBytes: s.KVBytes, Pinned: s.Pinned, Active: s.Active, Settings: settings[d.ID]}
		if e.State == "" {
			e.State = string(runner.StateUnloaded)
		}
		if s.State == runner.StateReady || s.State == runner.StateIdle {
			e.LoadedOn = []string{h.cfg.Self}
		}
		if !s.LastUsed.IsZero() {
			u := s.LastUsed.Unix()
			e.LastUsed = &u
		}
		if m := settings[d.ID].MaxContext; m > 0 && (e.ContextLength == 0 || m < e.ContextLength) {
			e.ContextLength = m
		}
		out = append(out, e)
	}
	return out
}

// clusterModels lists the models of every live node, merged by id.
func (h *Handler) clusterModels(ctx context.Context) ModelList {
	out := ModelList{Object: "list", Data: h.localModels()}
	if out.Data == nil {
		out.Data = []ModelEntry{}
	}
	for _, a := range h.each(ctx, http.MethodGet, "/admin/api/models", nil, nil) {
		var l ModelList
		if a.err == nil {
			a.err = json.Unmarshal(a.body, &l)
		}
		if a.err != nil {
			if out.Unreachable == nil {
				out.Unreachable = map[string]string{}
			}
			out.Unreachable[a.node] = a.err.Error()
			continue
		}
		out.Data = mergeModels(out.Data, l.Data)
	}
	sort.Slice(out.Data, func(i, j int) bool { return out.Data[i].ID < out.Data[j].ID })
	return out
}

// mergeModels adds a node's entries to the merged list.
func mergeModels(into, from []ModelEntry) []ModelEntry {
	for _, e := range from {
		i := slices.IndexFunc(into, func(m ModelEntry) bool { return m.ID == e.ID })
		if i < 0 {
			into = append(into, e)
			continue
		}
		m := &into[i]
		m.Nodes = append(m.Nodes, e.Nodes...)
		m.LoadedOn = append(m.LoadedOn, e.LoadedOn...)
		sort.Strings(m.Nodes)
		sort.Strings(m.LoadedOn)
		m.Bytes += e.Bytes
		m.KVBytes += e.KVBytes
		m.Active += e.Active
		m.Pinned = m.Pinned || e.Pinned
		if stateRank(e.State) > stateRank(m.State) {
			m.State = e.State
		}
		if e.LastUsed != nil && (m.LastUsed == nil || *e.LastUsed > *m.LastUsed) {
			m.LastUsed = e.LastUsed
		}
		if !e.Compatible && m.Compatible {
			m.Compatible, m.Reason = false, e.Reason
		}
	}
	return into
}

func stateRank(s string) int {
	return slices.Index([]string{string(runner.StateUnloaded), string(runner.StateIdle), string(runner.StateLoading), string(runner.StateReady)}, s)
}

func (h *Handler) listModels(w http.ResponseWriter, r *http.Request) {
	if h.forwarded(w, r, nil) {
		return
	}
	if h.local(r) {
		data := h.localModels()
		if data == nil {
			data = []ModelEntry{}
		}
		openai.WriteJSON(w, http.StatusOK, ModelList{Object: "list", Data: data})
		return
	}
	openai.WriteJSON(w, http.StatusOK, h.clusterModels(r.Context()))
}

// actionBody is the optional body of load and unload.
type actionBody struct {
	Node string `json:"node"`
}

// modelAction loads or unloads the model named by the path, on the node
// named by ?node or the body's "node"; without one, a load runs here when
// this node has the model, else on the first node (by id) that has it,
// and an unload runs on every node that has it loaded. Unknown 404, busy
// (unload with requests in flight) 409, over the memory budget 503.
func (h *Handler) modelAction(do func(Models, context.Context, string) error, verb string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := modelParam(r)
		body, e := readBody(r)
		if e != nil {
			openai.WriteError(w, e)
			return
		}
		var ab actionBody
		if e := decodeStrict(body, &ab, "node"); e != nil {
			openai.WriteError(w, e)
			return
		}
		nodeFromBody(r, ab.Node)
		if h.forwarded(w, r, nil) {
			return
		}
		if h.local(r) {
			h.localAction(w, r, do, id)
			return
		}
		// Cluster-wide: pick the nodes.
		list := h.clusterModels(r.Context())
		i := slices.IndexFunc(list.Data, func(m ModelEntry) bool { return m.ID == id })
		if i < 0 {
			openai.WriteError(w, openai.ModelNotFound(id))
			return
		}
		m := list.Data[i]
		var nodes []string
		switch {
		case verb == "load" && slices.Contains(m.Nodes, h.cfg.Self):
			nodes = []string{h.cfg.Self}
		case verb == "load":
			nodes = m.Nodes[:1]
		default:
			nodes = m.LoadedOn
		}
		for _, n := range nodes {
			if n == h.cfg.Self {
				if err := do(h.models, r.Context(), id); err != nil {
					writeActionError(w, err, id)
					return
				}
				continue
			}
			q := r.URL.Query()
			q.Set("node", n)
			rep, err := h.cfg.Peers.Forward(r.Context(), n, Call{Method: r.Method, Path: r.URL.EscapedPath(), Query: q.Encode()})
			if err != nil {
				openai.WriteError(w, fmt.Errorf("node %s: %w", n, err))
				return
			}
			if rep.Status != http.StatusOK {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(rep.Status)
				_, _ = w.Write(rep.Body)
				return
			}
		}
		list = h.clusterModels(r.Context())
		if i := slices.IndexFunc(list.Data, func(m ModelEntry) bool { return m.ID == id }); i >= 0 {
			m = list.Data[i]
		}
		if nodes == nil {
			nodes = []string{}
		}
		openai.WriteJSON(w, http.StatusOK, ModelAction{Status: "ok", Model: m, Nodes: nodes})
	}
}

func (h *Handler) localAction(w http.ResponseWriter, r *http.Request, do func(Models, context.Context, string) error, id string) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Minute)
	defer cancel()
	if err := do(h.models, ctx, id); err != nil {
		writeActionError(w, err, id)
		return
	}
	for _, e := range h.localModels() {
		if e.ID == id {
			openai.WriteJSON(w, http.StatusOK, ModelAction{Status: "ok", Model: e, Nodes: []string{h.cfg.Self}})
			return
		}
	}
	openai.WriteError(w, openai.ModelNotFound(id))
}

func writeActionError(w http.ResponseWriter, err error, id string) {
	if errors.Is(err, runner.ErrBusy) {
		openai.WriteError(w, &openai.Error{Status: http.StatusConflict, Type: openai.TypeInvalidRequest, Code: "model_busy", Param: "id", Message: err.Error()})
		return
	}
	openai.WriteError(w, openai.EngineError(err, id))
}

// putSettings replaces a model's settings in the replicated store; every
// node applies them when the write reaches it.
func (h *Handler) putSettings(w http.ResponseWriter, r *http.Request) {
	id := modelParam(r)
	body, e := readBody(r)
	if e != nil {
		openai.WriteError(w, e)
		return
	}
	s, e := ParseModelSettings(body)
	if e != nil {
		openai.WriteError(w, e)
		return
	}
	if h.cfg.Store == nil {
		openai.WriteError(w, &openai.Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "settings_unavailable", Message: "This node cannot store settings."})
		return
	}
	list := h.clusterModels(r.Context())
	ids := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	if !slices.Contains(ids, id) {
		openai.WriteError(w, openai.ModelNotFound(id))
		return
	}
	if e := checkAlias(id, s, ids, h.modelSettings()); e != nil {
		openai.WriteError(w, e)
		return
	}
	if e := h.checkDraft(r.Context(), id, s, ids); e != nil {
		openai.WriteError(w, e)
		return
	}
	b, err := json.Marshal(s)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	if err := h.cfg.Store.PutSetting(r.Context(), ModelSettingsPrefix+id, b); err != nil {
		openai.WriteError(w, &openai.Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "settings_not_written", Message: "The settings were not written: " + err.Error()})
		return
	}
	openai.WriteJSON(w, http.StatusOK, SettingsAnswer{Status: "ok", Model: id, Settings: s})
}

// modelParam is the {id} of a model route, unescaped: a model named
// ORG/NAME (one from the Hugging Face cache) comes as ORG%2FNAME.
func modelParam(r *http.Request) string {
	id := chi.URLParam(r, "id")
	if u, err := url.PathUnescape(id); err == nil {
		return u
	}
	return id
}
