package admin

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"fusion/engine"
	"fusion/engine/parser"
	"fusion/engine/runner"
	"fusion/engine/sample"
	"fusion/router/openai"
)

// Store holds the settings every node agrees on: the Raft state in a
// cluster (a write goes through the leader and every node applies it),
// node.db on a lone node.
type Store interface {
	// Setting returns the value of key.
	Setting(key string) ([]byte, bool)
	// Settings returns every setting whose key starts with prefix, by key.
	Settings(prefix string) map[string][]byte
	// PutSetting writes key; it returns once the write is committed.
	PutSetting(ctx context.Context, key string, value []byte) error
}

// ModelSettingsPrefix is the settings key prefix of per-model settings
// (the model id follows).
const ModelSettingsPrefix = "admin/model/"

// ModelSettings are an operator's settings of one model, the body of PUT
// /admin/api/models/{id}/settings. Absent fields are unset. A PUT
// replaces all of a model's settings.
type ModelSettings struct {
	// Default sampling parameters: a request that leaves one out gets it.
	Temperature       *float64 `json:"temperature,omitempty"`
	TopP              *float64 `json:"top_p,omitempty"`
	TopK              *int     `json:"top_k,omitempty"`
	MinP              *float64 `json:"min_p,omitempty"`
	RepetitionPenalty *float64 `json:"repetition_penalty,omitempty"`
	// MaxContext caps the model's context window (tokens).
	MaxContext int `json:"max_context,omitempty"`
	// ChatTemplate replaces the model's chat template (Jinja source).
	ChatTemplate string `json:"chat_template,omitempty"`
	// CompletionsAsChat renders /v1/completions prompts as a chat.
	CompletionsAsChat bool `json:"completions_as_chat,omitempty"`
	// Pinned keeps the model from eviction and idle unload.
	Pinned bool `json:"pinned,omitempty"`
	// TTLSeconds unloads the model after that long unused (0: the node's
	// --idle-ttl).
	TTLSeconds int `json:"ttl_seconds,omitempty"`
	// Alias is another name requests may use for the model.
	Alias string `json:"alias,omitempty"`
	// ReasoningParser and ToolParser override the output parser family
	// detected from the chat template (engine/parser names; the family
	// parses both, ToolParser wins when both are set).
	ReasoningParser string `json:"reasoning_parser,omitempty"`
	ToolParser      string `json:"tool_parser,omitempty"`
	// DraftModel drafts tokens for this model in speculative decoding
	// (backend_override "rapid"): a model of the same tokenizer and
	// vocabulary; absent: prompt lookup. NumDraftTokens is how many it
	// proposes per step (absent: the node's). Speculative makes "rapid"
	// the default for the model's requests.
	DraftModel     string `json:"draft_model,omitempty"`
	NumDraftTokens int    `json:"num_draft_tokens,omitempty"`
	Speculative    bool   `json:"speculative,omitempty"`
	// CloudFallback sends the model's requests to its cloud upstream
	// (router/cloud) when the cluster would refuse them with a 429 or
	// 503 (full queues, no node able to load it).
	CloudFallback bool `json:"cloud_fallback,omitempty"`
}

// Limits of per-model settings.
const (
	MaxContextLimit   = 1 << 24        // max_context
	MaxTTLSeconds     = 30 * 24 * 3600 // ttl_seconds: 30 days
	MaxAliasLen       = 128            // alias
	MaxChatTemplateSz = 1 << 20        // chat_template bytes
	maxTopK           = 1 << 20        // top_k
	maxSettingsBody   = 2 << 20        // the PUT body
	maxTemperature    = 2.0            // as the OpenAI dialect
	ttlUnit           = time.Second    // ttl_seconds
)

var modelSettingsKeys = []string{"temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_context", "chat_template",
	"completions_as_chat", "pinned", "ttl_seconds", "alias", "reasoning_parser", "tool_parser",
	"draft_model", "num_draft_tokens", "speculative", "cloud_fallback"}

// ParseModelSettings decodes and validates a settings body: unknown keys,
// wrong types and out-of-range values are a 400 naming the key.
func ParseModelSettings(body []byte) (ModelSettings, *openai.Error) {
	var s ModelSettings
	if len(body) == 0 {
		return s, openai.InvalidRequest("", "The body must be a JSON object of settings.")
	}
	if len(body) > maxSettingsBody {
		return s, openai.InvalidRequest("", "The settings are %d bytes; at most %d.", len(body), maxSettingsBody)
	}
	if e := decodeStrict(body, &s, modelSettingsKeys...); e != nil {
		return s, e
	}
	return s, s.validate()
}

func (s ModelSettings) validate() *openai.Error {
	if s.Temperature != nil && !(*s.Temperature >= 0 && *s.Temperature <= maxTemperature) {
		return openai.InvalidRequest("temperature", "Invalid 'temperature': %v must be between 0 and %v.", *s.Temperature, maxTemperature)
	}
	if s.TopK != nil && (*s.TopK < 0 || *s.TopK > maxTopK) {
		return openai.InvalidRequest("top_k", "Invalid 'top_k': %d must be between 0 and %d.", *s.TopK, maxTopK)
	}
	// The sampler's own ranges for the rest.
	p := sample.DefaultParams()
	s.sampling().Apply(&p)
	if err := p.Validate(); err != nil {
		var pe *sample.ParamError
		if errors.As(err, &pe) {
			return openai.InvalidRequest(pe.Param, "Invalid '%s': %s.", pe.Param, pe.Msg)
		}
		return openai.InvalidRequest("", "%v", err)
	}
	switch {
	case s.MaxContext < 0 || s.MaxContext > MaxContextLimit:
		return openai.InvalidRequest("max_context", "Invalid 'max_context': %d must be between 1 and %d (0 or absent: the model's).", s.MaxContext, MaxContextLimit)
	case s.TTLSeconds < 0 || s.TTLSeconds > MaxTTLSeconds:
		return openai.InvalidRequest("ttl_seconds", "Invalid 'ttl_seconds': %d must be between 0 and %d.", s.TTLSeconds, MaxTTLSeconds)
	case len(s.Alias) > MaxAliasLen || s.Alias != strings.TrimSpace(s.Alias) || strings.ContainsAny(s.Alias, "/?#\x00"):
		return openai.InvalidRequest("alias", "Invalid 'alias': at most %d characters, no surrounding spaces, no '/', '?' or '#'.", MaxAliasLen)
	case len(s.ChatTemplate) > MaxChatTemplateSz:
		return openai.InvalidRequest("chat_template", "Invalid 'chat_template': %d bytes; at most %d.", len(s.ChatTemplate), MaxChatTemplateSz)
	case s.NumDraftTokens < 0 || s.NumDraftTokens > runner.MaxDraftTokens:
		return openai.InvalidRequest("num_draft_tokens", "Invalid 'num_draft_tokens': %d must be between 1 and %d (0 or absent: the node's).", s.NumDraftTokens, runner.MaxDraftTokens)
	}
	for _, f := range []struct{ key, v string }{{"reasoning_parser", s.ReasoningParser}, {"tool_parser", s.ToolParser}} {
		if f.v == "" {
			continue
		}
		if _, err := parser.New(f.v, parser.Options{}); err != nil {
			return openai.InvalidRequest(f.key, "Invalid '%s': %v.", f.key, err)
		}
	}
	return nil
}

// sampling are the settings' sampling defaults for the runner.
func (s ModelSettings) sampling() runner.SamplingDefaults {
	return runner.SamplingDefaults{Temperature: s.Temperature, TopP: s.TopP, TopK: s.TopK, MinP: s.MinP, RepetitionPenalty: s.RepetitionPenalty}
}

// Runner is what the engine pool applies of the settings (the node
// hands it to runner.SetModelSettings on every node).
func (s ModelSettings) Runner() runner.ModelSettings {
	p := s.ToolParser
	if p == "" {
		p = s.ReasoningParser
	}
	return runner.ModelSettings{ContextLength: s.MaxContext, Sampling: s.sampling(), Parser: p, Pinned: s.Pinned,
		IdleTTL: time.Duration(s.TTLSeconds) * ttlUnit, ChatTemplate: s.ChatTemplate,
		DraftModel: s.DraftModel, NumDraftTokens: s.NumDraftTokens, Speculative: s.Speculative}
}

// DecodeModelSettings reads stored settings (zero when they do not parse).
func DecodeModelSettings(b []byte) ModelSettings {
	var s ModelSettings
	_ = json.Unmarshal(b, &s)
	return s
}

// modelSettings returns every model's stored settings, by model id.
func (h *Handler) modelSettings() map[string]ModelSettings {
	out := map[string]ModelSettings{}
	if h.cfg.Store == nil {
		return out
	}
	for k, v := range h.cfg.Store.Settings(ModelSettingsPrefix) {
		out[strings.TrimPrefix(k, ModelSettingsPrefix)] = DecodeModelSettings(v)
	}
	return out
}

// DraftChecker is what the Models of this node may offer to check a
// draft_model against its target (runner.Runner.CheckDraft).
type DraftChecker interface {
	CheckDraft(ctx context.Context, target, draft string) error
}

// checkDraft refuses a draft_model that is not a model of the cluster,
// is the model itself, or (where this node holds both) has another
// tokenizer or vocabulary. A pair this node cannot read is checked when
// the node that has it loads the model (which then fails to load, naming
// draft_model).
func (h *Handler) checkDraft(ctx context.Context, id string, s ModelSettings, ids []string) *openai.Error {
	if s.DraftModel == "" {
		return nil
	}
	if s.DraftModel == id {
		return openai.InvalidRequest("draft_model", "Invalid 'draft_model': %q cannot draft for itself.", id)
	}
	if !slices.Contains(ids, s.DraftModel) {
		return openai.InvalidRequest("draft_model", "Invalid 'draft_model': %q is not a model of this cluster.", s.DraftModel)
	}
	dc, ok := h.models.(DraftChecker)
	if !ok {
		return nil
	}
	if err := dc.CheckDraft(ctx, id, s.DraftModel); err != nil && !errors.Is(err, engine.ErrModelNotFound) {
		return openai.InvalidRequest("draft_model", "Invalid 'draft_model': %v.", err)
	}
	return nil
}

// checkAlias refuses an alias that is a model's id or another model's
// alias.
func checkAlias(id string, s ModelSettings, ids []string, all map[string]ModelSettings) *openai.Error {
	if s.Alias == "" {
		return nil
	}
	if s.Alias == id {
		return nil
	}
	for _, m := range ids {
		if m == s.Alias {
			return openai.InvalidRequest("alias", "Invalid 'alias': %q is the id of a model.", s.Alias)
		}
	}
	for m, o := range all {
		if m != id && o.Alias == s.Alias {
			return openai.InvalidRequest("alias", "Invalid 'alias': %q is already the alias of %q.", s.Alias, m)
		}
	}
	return nil
}
