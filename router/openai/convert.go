package openai

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"fusion/engine"
	"fusion/engine/sample"
	"fusion/router/jsonkind"
	"fusion/router/mcpchat"
)

// Options are the node settings the converters apply.
type Options struct {
	// MaxTokens caps max_tokens (and max_completion_tokens); a request over
	// it is a 400. 0: no cap here (the engine may still have one).
	MaxTokens int
	// CompletionsAsChat names the models whose /v1/completions prompts are
	// wrapped into a one-message chat and rendered with the chat template.
	CompletionsAsChat map[string]bool
	// AsChat, when set, also names such models (the per-model settings of
	// the admin API, which change while the node runs).
	AsChat func(model string) bool
	// MaxAudioBytes and MaxAudioSeconds cap an upload to
	// /v1/audio/transcriptions, translations and process (0: DefaultMaxAudioBytes,
	// DefaultMaxAudioSeconds); over them is a 400.
	MaxAudioBytes   int64
	MaxAudioSeconds float64
	// MaxTranscriptionTokens is the largest max_tokens of a transcription
	// or translation (0: DefaultMaxTranscriptionTokens); over it is a 400.
	MaxTranscriptionTokens int
	// VADModel is the model vad_filter and batched transcriptions find
	// speech with ("": DefaultVADModel); absent, they are 400s naming it.
	VADModel string
	// MaxSpeechInput caps /v1/audio/speech's input in characters (0:
	// DefaultMaxSpeechInput); over it is a 400.
	MaxSpeechInput int
	// MaxImageSide, MaxImages and MaxImageSteps cap an image generation's
	// width and height, n and steps (0: DefaultMaxImageSide,
	// DefaultMaxImages, DefaultMaxImageSteps); over them is a 400.
	// ImageRetention is how long a url result is served (0:
	// DefaultImageRetention).
	MaxImageSide, MaxImages, MaxImageSteps int
	ImageRetention                         time.Duration
	// NodeID is this node's id in its cluster: url results carry it, so
	// that any node can fetch them from here (the engine's
	// engine.ImageFileFetcher). "": a lone node, ids without one.
	NodeID string
	// ImageFiles keeps the url results (nil: a store of the handler's
	// own); a node shares it with its Engine service's ImageFile rpc.
	ImageFiles *ImageStore
}

// Limits of request fields, as the OpenAI API sets them where it does.
const (
	maxN         = 128 // n
	maxStops     = 16  // stop sequences (OpenAI: 4; vLLM: no limit)
	maxTemp      = 2   // temperature
	maxLegacyLPs = 5   // legacy completions logprobs
)

// The backend_override values: the compute backends a request can be
// pinned to (engine.Request.Backend; the dispatcher finds a node),
// "rapid" (speculative decoding, engine.Request.Speculative), and
// "cloud" (engine.Request.Backend too: a configured upstream provider
// answers, see router/cloud).
var (
	engineBackends = []string{"mlx", "cpu"}
	rapidBackend   = "rapid"
	cloudBackend   = engine.BackendCloud
)

// BackendOverrides lists the values backend_override takes.
func BackendOverrides() []string {
	return append(slices.Clone(engineBackends), rapidBackend, cloudBackend)
}

// plan is a converted request: one engine request per choice, plus what
// the encoder needs to shape the answer.
type plan struct {
	reqs         []*engine.Request
	promptOf     []int // prompt index of each choice (completions with a list of prompts)
	stream       bool
	includeUsage bool
	logprobs     bool
	topLogprobs  int
	mcp          *mcpchat.Toolset // the MCP tools the server runs (nil: none)
}

// convertCommon checks the shared fields and fills base with them. n is
// the number of choices per prompt.
func (c *commonRequest) convertCommon(opts Options, base *engine.Request, maxTokens *int, maxTokensParam string) (n int, stream, includeUsage bool, err *Error) {
	if base.Stop, err = parseStop(c.Stop); err != nil {
		return
	}
	if base.MaxTokens, err = checkMaxTokens(maxTokens, maxTokensParam, opts.MaxTokens); err != nil {
		return
	}
	n = 1
	if c.N != nil {
		if *c.N < 1 || *c.N > maxN {
			err = invalidRequest("n", "Invalid 'n': %d must be between 1 and %d.", *c.N, maxN)
			return
		}
		n = *c.N
	}
	stream = c.Stream != nil && *c.Stream
	if c.StreamOptions != nil {
		if !stream {
			err = invalidRequest("stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
			return
		}
		includeUsage = c.StreamOptions.IncludeUsage != nil && *c.StreamOptions.IncludeUsage
	}
	if base.Priority, err = parseTaskTag(c.TaskTag); err != nil {
		return
	}
	if err = checkBackend(c.BackendOverride); err == nil && c.BackendOverride != nil {
		if *c.BackendOverride == rapidBackend {
			base.Speculative = true
		} else {
			base.Backend = *c.BackendOverride
		}
	}
	return
}

// samplingParams turns the sampling fields into sampler parameters,
// starting from OpenAI's defaults (temperature 1, top_p 1).
func (c *commonRequest) samplingParams(logprobs bool, topLogprobs int) (sample.Params, *Error) {
	p := sample.DefaultParams()
	if c.Temperature != nil {
		if t := *c.Temperature; !(t >= 0 && t <= maxTemp) {
			return p, invalidRequest("temperature", "Invalid 'temperature': %v must be between 0 and %d.", t, maxTemp)
		}
		p.Temperature = *c.Temperature
	}
	if c.TopP != nil {
		p.TopP = *c.TopP
		if p.TopP == 0 {
			// OpenAI takes 0; the nucleus of the smallest positive mass is
			// the most likely token alone.
			p.TopP = math.SmallestNonzeroFloat64
		}
	}
	if c.TopK != nil {
		p.TopK = *c.TopK
		if p.TopK == -1 { // vLLM's "off"
			p.TopK = 0
		}
	}
	if c.MinP != nil {
		p.MinP = *c.MinP
	}
	if c.RepetitionPenalty != nil {
		p.RepetitionPenalty = *c.RepetitionPenalty
	}
	if c.PresencePenalty != nil {
		p.PresencePenalty = *c.PresencePenalty
	}
	if c.FrequencyPenalty != nil {
		p.FrequencyPenalty = *c.FrequencyPenalty
	}
	if len(c.LogitBias) > 0 {
		p.LogitBias = make(map[int]float64, len(c.LogitBias))
		for k, v := range c.LogitBias {
			id, err := strconv.Atoi(strings.TrimSpace(k))
			if err != nil || id < 0 {
				return p, invalidRequest("logit_bias", "Invalid 'logit_bias': key %q is not a token id (a non-negative integer).", k)
			}
			p.LogitBias[id] = v
		}
	}
	p.Seed = c.Seed
	p.Logprobs = logprobs
	p.TopLogprobs = topLogprobs
	if err := p.Validate(); err != nil {
		var pe *sample.ParamError
		if errors.As(err, &pe) {
			return p, invalidRequest(pe.Param, "Invalid '%s': %s.", pe.Param, pe.Msg)
		}
		return p, invalidRequest("", "%s", err.Error())
	}
	return p, nil
}

// checkMaxTokens validates max_tokens against the node's cap; 0 means not
// given.
func checkMaxTokens(v *int, param string, limit int) (int, *Error) {
	if v == nil {
		return 0, nil
	}
	switch {
	case *v < 1:
		return 0, invalidRequest(param, "Invalid '%s': integer below minimum value. Expected a value >= 1, but got %d instead.", param, *v)
	case limit > 0 && *v > limit:
		return 0, invalidRequest(param, "Invalid '%s': %d is over this server's limit of %d tokens per request.", param, *v, limit)
	}
	return *v, nil
}

// parseStop reads stop: null, a string, or an array of strings.
func parseStop(raw json.RawMessage) ([]string, *Error) {
	if isNull(raw) {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, invalidType("stop", "a string or an array of strings", jsonkind.Of(raw))
	}
	if len(list) > maxStops {
		return nil, invalidRequest("stop", "Invalid 'stop': at most %d stop sequences, got %d.", maxStops, len(list))
	}
	return slices.DeleteFunc(list, func(s string) bool { return s == "" }), nil
}

// parseTaskTag maps task_tag to a scheduling class.
func parseTaskTag(tag *string) (engine.Priority, *Error) {
	if tag == nil {
		return engine.PriorityBatch, nil
	}
	p, ok := engine.PriorityOf(*tag)
	if !ok {
		return 0, invalidRequest("task_tag", "Invalid 'task_tag': %q is not one of claude_code, openclaw, background.", *tag)
	}
	return p, nil
}

// checkBackend accepts a backend_override naming a compute backend,
// "rapid" or "cloud".
func checkBackend(b *string) *Error {
	if b == nil || *b == "" || slices.Contains(BackendOverrides(), *b) {
		return nil
	}
	return invalidRequest("backend_override", "Invalid 'backend_override': %q is not one of %s.", *b, strings.Join(BackendOverrides(), ", "))
}

func isNull(raw json.RawMessage) bool {
	t := strings.TrimSpace(string(raw))
	return t == "" || t == "null"
}

// FinishReason is OpenAI's finish_reason of an engine finish reason (also the
// OpenClaw dialect's).
func FinishReason(r engine.FinishReason) string {
	switch r {
	case "":
		return string(engine.FinishStop)
	case engine.FinishContextWindow: // OpenAI has no word for it
		return string(engine.FinishLength)
	}
	return string(r)
}

// usage sums the engine usage of the choices. Choices that share a prompt
// (n > 1) count its tokens once, as OpenAI does.
func usage(per []engine.Usage, promptOf []int) Usage {
	var u Usage
	seen := map[int]bool{}
	for i, e := range per {
		p := 0
		if i < len(promptOf) {
			p = promptOf[i]
		}
		if !seen[p] {
			seen[p] = true
			u.PromptTokens += e.PromptTokens
			u.CachedTokens += e.CachedTokens
		}
		u.CompletionTokens += e.CompletionTokens
		if e.DraftedTokens > 0 {
			if u.Speculative == nil {
				u.Speculative = &SpeculativeUsage{}
			}
			u.Speculative.Drafted += e.DraftedTokens
			u.Speculative.Accepted += e.AcceptedTokens
		}
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	u.PromptTokensDetails.CachedTokens = u.CachedTokens
	return u
}

// logprob makes a log-probability JSON-safe: -Inf (a masked token) becomes
// -9999, as OpenAI reports it.
func logprob(lp float64) float64 {
	if math.IsInf(lp, -1) || math.IsNaN(lp) || lp < -9999 {
		return -9999
	}
	return lp
}

func tokenBytes(s string) []int {
	b := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		b[i] = int(s[i])
	}
	return b
}
