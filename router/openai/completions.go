package openai

import (
	"encoding/json"
	"fmt"
	"fusion/router/jsonkind"
	"unicode/utf8"

	"fusion/engine"
	"fusion/engine/chattemplate"
)

// CompletionRequest is the body of POST /v1/completions (the legacy text
// completions API).
type CompletionRequest struct {
	Model  string          `json:"model"`
	Prompt json.RawMessage `json:"prompt"`
	commonRequest

	Echo     *bool   `json:"echo"`
	Logprobs *int    `json:"logprobs"`
	Suffix   *string `json:"suffix"`
	BestOf   *int    `json:"best_of"`
}

// Completion is the answer of a non-streamed completion, and (object
// "text_completion" too) each chunk of a streamed one.
type Completion struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"` // "text_completion"
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint"`
	Choices           []CompletionChoice `json:"choices"`
	Usage             OptionalUsage      `json:"usage,omitzero"`
}

// CompletionChoice is one choice of a Completion.
type CompletionChoice struct {
	Text         string          `json:"text"`
	Index        int             `json:"index"`
	Logprobs     *LegacyLogprobs `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

// LegacyLogprobs is the completions API's logprobs shape.
type LegacyLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// completionPrompt is one prompt of a completions request.
type completionPrompt struct {
	text   *string
	tokens []int
}

// parsePrompt reads prompt: a string, an array of strings, an array of
// token ids, or an array of arrays of token ids.
func parsePrompt(raw json.RawMessage) ([]completionPrompt, *Error) {
	return parseTextsOrIDs(raw, "prompt")
}

// parseTextsOrIDs reads a field (param) that is a string, an array of
// strings, an array of token ids, or an array of arrays of token ids (the
// prompt of completions, the input of embeddings).
func parseTextsOrIDs(raw json.RawMessage, param string) ([]completionPrompt, *Error) {
	if isNull(raw) {
		return nil, missingParam(param)
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []completionPrompt{{text: &one}}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, invalidType(param, "a string, an array of strings or an array of token ids", jsonkind.Of(raw))
	}
	if len(items) == 0 {
		return nil, invalidRequest(param, "Invalid '%s': empty array.", param)
	}
	if ids, ok := tokenIDs(raw); ok {
		return []completionPrompt{{tokens: ids}}, nil
	}
	out := make([]completionPrompt, len(items))
	for i, it := range items {
		var s string
		if json.Unmarshal(it, &s) == nil {
			out[i] = completionPrompt{text: &s}
			continue
		}
		ids, ok := tokenIDs(it)
		if !ok || len(ids) == 0 {
			return nil, invalidType(fmt.Sprintf("%s[%d]", param, i), "a string or a non-empty array of token ids", jsonkind.Of(it))
		}
		out[i] = completionPrompt{tokens: ids}
	}
	return out, nil
}

// tokenIDs reads an array of non-negative integers.
func tokenIDs(raw json.RawMessage) ([]int, bool) {
	var ids []int
	if json.Unmarshal(raw, &ids) != nil {
		return nil, false
	}
	for _, id := range ids {
		if id < 0 {
			return nil, false
		}
	}
	return ids, true
}

// toPlan checks a completions request and converts it into one engine
// request per choice: n choices for each prompt, prompt-major as OpenAI
// numbers them.
func (req *CompletionRequest) toPlan(opts Options, id string) (*plan, []completionPrompt, *Error) {
	if req.Model == "" {
		return nil, nil, missingParam("model")
	}
	prompts, err := parsePrompt(req.Prompt)
	if err != nil {
		return nil, nil, err
	}
	if req.Suffix != nil && *req.Suffix != "" {
		return nil, nil, unsupported("suffix", "suffix is not supported by this server.")
	}
	var base engine.Request
	base.ID, base.Model = id, req.Model
	n, stream, includeUsage, err := req.convertCommon(opts, &base, req.MaxTokens, "max_tokens")
	if err != nil {
		return nil, nil, err
	}
	if req.BestOf != nil && *req.BestOf != n {
		return nil, nil, unsupported("best_of", "best_of other than n is not supported by this server.")
	}
	top, logprobs := 0, req.Logprobs != nil
	if logprobs {
		top = *req.Logprobs
		if top < 0 || top > maxLegacyLPs {
			return nil, nil, invalidRequest("logprobs", "Invalid 'logprobs': %d must be between 0 and %d.", top, maxLegacyLPs)
		}
	}
	echo := req.Echo != nil && *req.Echo
	if echo && logprobs {
		return nil, nil, unsupported("echo", "echo together with logprobs is not supported by this server (prompt log-probabilities are not computed).")
	}
	if base.Sampling, err = req.samplingParams(logprobs, top); err != nil {
		return nil, nil, err
	}
	asChat := opts.CompletionsAsChat[req.Model] || (opts.AsChat != nil && opts.AsChat(req.Model))
	p := &plan{stream: stream, includeUsage: includeUsage, logprobs: logprobs, topLogprobs: top}
	for pi, pr := range prompts {
		r := base
		r.ID = fmt.Sprintf("%s-%d", id, pi)
		if len(prompts) == 1 {
			r.ID = id
		}
		switch {
		case pr.tokens != nil && asChat:
			return nil, nil, unsupported("prompt", "token-id prompts cannot be converted to chat format (model %q is set to do so).", req.Model)
		case pr.tokens != nil:
			r.PromptTokens = pr.tokens
		case asChat:
			r.Messages = []*chattemplate.Object{chattemplate.NewObject("role", "user", "content", *pr.text)}
		default:
			r.Prompt = pr.text
		}
		for _, c := range fanOut(&r, n) {
			p.reqs = append(p.reqs, c)
			p.promptOf = append(p.promptOf, pi)
		}
	}
	return p, prompts, nil
}

// completionEncoder builds completions, streamed or not.
type completionEncoder struct {
	meta         meta
	plan         *plan
	echo         []string // per prompt: the text to put before the completion ("" without echo)
	choices      []choiceState
	offsets      []int // per choice: characters of text so far (for text_offset)
	open         int
	includeUsage bool
}

func newCompletionEncoder(m meta, p *plan, echo []string) *completionEncoder {
	e := &completionEncoder{meta: m, plan: p, echo: echo, choices: make([]choiceState, len(p.reqs)),
		offsets: make([]int, len(p.reqs)), open: len(p.reqs), includeUsage: p.includeUsage}
	for i := range e.offsets {
		e.offsets[i] = utf8.RuneCountInString(e.echoOf(i))
	}
	return e
}

func (e *completionEncoder) echoOf(i int) string {
	if e.echo == nil {
		return ""
	}
	return e.echo[e.plan.promptOf[i]]
}

func (e *completionEncoder) legacyLogprobs(i int, tokens []engine.TokenLogprob, top [][]engine.TokenLogprob) *LegacyLogprobs {
	lp := &LegacyLogprobs{Tokens: make([]string, len(tokens)), TokenLogprobs: make([]float64, len(tokens)),
		TopLogprobs: make([]map[string]float64, len(tokens)), TextOffset: make([]int, len(tokens))}
	for j, t := range tokens {
		lp.Tokens[j] = t.Text
		lp.TokenLogprobs[j] = logprob(t.Logprob)
		alts := map[string]float64{}
		if j < len(top) {
			for _, a := range top[j] {
				if _, dup := alts[a.Text]; !dup {
					alts[a.Text] = logprob(a.Logprob)
				}
			}
		}
		lp.TopLogprobs[j] = alts
		lp.TextOffset[j] = e.offsets[i]
		e.offsets[i] += utf8.RuneCountInString(t.Text)
	}
	return lp
}

func (e *completionEncoder) completion(choices ...CompletionChoice) Completion {
	return Completion{ID: e.meta.ID, Object: "text_completion", Created: e.meta.Created, Model: e.meta.Model,
		SystemFingerprint: e.meta.SystemFingerprint, Choices: choices}
}

// add records an event for the non-streamed answer.
func (e *completionEncoder) add(i int, ev engine.Event) { e.choices[i].add(ev) }

// result is the non-streamed answer.
func (e *completionEncoder) result() Completion {
	out := e.completion(make([]CompletionChoice, len(e.choices))...)
	per := make([]engine.Usage, len(e.choices))
	for i := range e.choices {
		ch := &e.choices[i]
		reason := FinishReason(ch.finish)
		out.Choices[i] = CompletionChoice{Text: e.echoOf(i) + ch.text.String(), Index: i, FinishReason: &reason}
		if e.plan.logprobs {
			out.Choices[i].Logprobs = e.legacyLogprobs(i, ch.tokens, ch.top)
		}
		per[i] = ch.usage
	}
	u := usage(per, e.plan.promptOf)
	out.Usage = OptionalUsage{Set: true, Usage: &u}
	return out
}

func (e *completionEncoder) chunk(choices ...CompletionChoice) Completion {
	c := e.completion(choices...)
	if e.includeUsage {
		c.Usage = OptionalUsage{Set: true}
	}
	return c
}

// start returns the echo chunks of a stream (none without echo).
func (e *completionEncoder) start() []Completion {
	var out []Completion
	for i := range e.choices {
		if s := e.echoOf(i); s != "" {
			out = append(out, e.chunk(CompletionChoice{Text: s, Index: i}))
		}
	}
	return out
}

// event returns the chunks of one event of choice i.
func (e *completionEncoder) event(i int, ev engine.Event) []Completion {
	var out []Completion
	if ev.Text != "" || (e.plan.logprobs && len(ev.Tokens) > 0) {
		ch := CompletionChoice{Text: ev.Text, Index: i}
		if e.plan.logprobs {
			ch.Logprobs = e.legacyLogprobs(i, ev.Tokens, padTop(ev))
		}
		out = append(out, e.chunk(ch))
	}
	if ev.Done {
		e.choices[i].usage = ev.Usage
		e.open--
		reason := FinishReason(ev.FinishReason)
		fin := e.chunk(CompletionChoice{Index: i, FinishReason: &reason})
		if e.open == 0 && !e.includeUsage {
			u := e.usage()
			fin.Usage = OptionalUsage{Set: true, Usage: &u}
		}
		out = append(out, fin)
	}
	return out
}

func (e *completionEncoder) usage() Usage {
	per := make([]engine.Usage, len(e.choices))
	for i := range e.choices {
		per[i] = e.choices[i].usage
	}
	return usage(per, e.plan.promptOf)
}

// end returns the usage chunk, if asked for.
func (e *completionEncoder) end() []Completion {
	if !e.includeUsage {
		return nil
	}
	u := e.usage()
	c := e.completion()
	c.Choices = []CompletionChoice{}
	c.Usage = OptionalUsage{Set: true, Usage: &u}
	return []Completion{c}
}

// echoTexts returns the text echo puts before each prompt's completions:
// the prompt itself (token prompts are decoded by the caller).
func echoTexts(prompts []completionPrompt, decode func([]int) (string, error)) ([]string, error) {
	out := make([]string, len(prompts))
	for i, p := range prompts {
		if p.text != nil {
			out[i] = *p.text
			continue
		}
		s, err := decode(p.tokens)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}
