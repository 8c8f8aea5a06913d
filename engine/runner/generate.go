package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"fusion/engine"
	"fusion/engine/grammar"
	"fusion/engine/parser"
	"fusion/engine/prompt"
	"fusion/engine/sample"
	"fusion/engine/tokenizer"
)

// languageModel is what the runner needs of a loaded model.
type languageModel interface {
	VocabSize() int
	ContextLength() int
	// NewSequence makes a sequence that may hold maxLen positions.
	NewSequence(maxLen int) (sequence, error)
	// Forward runs one step over a batch: each input's tokens at its
	// sequence's next positions. logits[i] are the logits of input i's
	// last token, or with stepInput.all of each of its tokens row after
	// row (valid until the next call). If it fails, the sequences
	// are as they were before the step.
	Forward(ctx context.Context, inputs []stepInput) ([][]float32, error)
	// KVBlock is how the KV cache grows: in blocks of that many positions
	// of bytesPerPosition each.
	KVBlock() (positions int, bytesPerPosition int64)
	WeightBytes() int64
	KVBytes() int64
	// Backend names the compute backend the model runs on.
	Backend() string
	Close() error
}

// sequence is one generation's state in a model (its KV cache).
type sequence interface {
	// Bytes is the KV memory the sequence has allocated.
	Bytes() int64
	Release()
}

// stepInput is one sequence's part of a batched step.
type stepInput struct {
	seq    sequence
	tokens []int
	gen    *generation // whose step it is (a pipeline samples on its last stage with it)
	all    bool        // logits of every token (verifying drafts), not only the last
}

// loader loads a model's weights.
type loader interface {
	load(info engine.ModelInfo) (languageModel, error)
	loadEmbedding(info engine.ModelInfo) (*embeddingModel, error)
}

// Generate admits req and streams its events. Errors before admission:
// engine.ErrModelNotFound, engine.ErrUnavailable, engine.ErrOverloaded (an
// *engine.OverloadedError with a retry hint), and
// *prompt.InvalidRequestError for a request the model cannot take.
func (r *Runner) Generate(ctx context.Context, req *engine.Request) (<-chan engine.Event, error) {
	select {
	case <-r.closed:
		return nil, fmt.Errorf("%w: shutting down", engine.ErrUnavailable)
	default:
	}
	if err := req.Sampling.Validate(); err != nil {
		return nil, &prompt.InvalidRequestError{Err: err}
	}
	if req.MaxTokens < 0 {
		return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("max_tokens must be positive, got %d", req.MaxTokens)}
	}
	if r.cfg.MaxTokens > 0 && req.MaxTokens > r.cfg.MaxTokens {
		return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("max_tokens %d is over this server's limit of %d", req.MaxTokens, r.cfg.MaxTokens)}
	}
	if req.Priority < engine.PriorityRealtime || req.Priority > engine.PriorityBackground {
		return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("unknown priority class %d", req.Priority)}
	}
	if req.Backend != "" {
		if _, err := r.entry(req.Model); err != nil {
			return nil, err
		}
		if have := r.backends.forModel(req.Model); have != req.Backend {
			return nil, fmt.Errorf("%w: %q runs on the %s backend on this node, not %s (backend_override)", engine.ErrUnavailable, req.Model, have, req.Backend)
		}
	}
	// Refuse before loading anything when the node is full.
	if n := r.inFlight.Load(); n >= int64(r.cfg.MaxQueued) {
		return nil, r.overloaded(n)
	}
	lm, release, err := r.acquire(ctx, req.Model)
	if err != nil {
		return nil, err
	}
	if lm.emb != nil {
		release()
		if lm.emb.ce != nil {
			return nil, invalid("model %q is a %s model; it answers /v1/rerank, not generation", req.Model, engine.KindRerank)
		}
		if lm.emb.tts != nil {
			return nil, invalid("model %q is a %s model; it answers /v1/audio/speech, not generation", req.Model, engine.KindSpeech)
		}
		if lm.emb.img != nil {
			return nil, invalid("model %q is an %s model; it answers /v1/images/generations, not generation", req.Model, engine.KindImage)
		}
		if lm.emb.asr != nil {
			return nil, invalid("model %q is a %s model; it answers /v1/audio/transcriptions, not generation", req.Model, engine.KindTranscription)
		}
		if lm.emb.vad != nil {
			return nil, invalid("model %q is a %s model; it answers /v1/audio/process (task vad), not generation", req.Model, engine.KindVAD)
		}
		if lm.emb.dn != nil {
			return nil, invalid("model %q is a %s model; it answers /v1/audio/process (task denoise), not generation", req.Model, engine.KindDenoise)
		}
		return nil, invalid("model %q is an %s model; it answers /v1/embeddings, not generation", req.Model, engine.KindEmbedding)
	}
	g, err := r.prepare(ctx, lm, req)
	if err != nil {
		release()
		return nil, err
	}
	if n := r.inFlight.Add(1); n > int64(r.cfg.MaxQueued) {
		r.inFlight.Add(-1)
		release()
		return nil, r.overloaded(n - 1)
	}
	g.release = release
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		g.deliver()
	}()
	lm.sched.submit(g)
	return g.events, nil
}

func (r *Runner) overloaded(inFlight int64) error {
	return &engine.OverloadedError{
		Reason:     fmt.Sprintf("%d requests in flight (limit %d)", inFlight, r.cfg.MaxQueued),
		RetryAfter: r.retryAfter(),
	}
}

// prepare tokenizes and checks req against the model and builds its
// generation.
func (r *Runner) prepare(ctx context.Context, lm *loadedModel, req *engine.Request) (*generation, error) {
	var (
		p   prompt.Result
		err error
	)
	if req.PromptTokens != nil {
		for i, id := range req.PromptTokens {
			if id < 0 || id >= lm.model.VocabSize() {
				return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("prompt[%d]: %d is not a token id of this model (vocabulary size %d)", i, id, lm.model.VocabSize())}
			}
		}
		p = prompt.Result{Tokens: req.PromptTokens, Count: len(req.PromptTokens)}
	} else if p, err = lm.text.Tokenize(req.PromptRequest()); err != nil {
		return nil, err
	}
	opened := harmonyOpen(lm, req, &p)
	ctxLen := lm.contextLength()
	if len(p.Tokens) == 0 {
		return nil, &prompt.InvalidRequestError{Err: errors.New("the prompt is empty")}
	}
	if len(p.Tokens) >= ctxLen {
		return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("the prompt is %d tokens; this model's context is %d", len(p.Tokens), ctxLen)}
	}
	if kv := lm.sched.kvFor(len(p.Tokens) + 1); kv > r.cfg.MaxKVBytes {
		return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("the prompt is %d tokens, needing %d bytes of KV cache; this node's limit is %d", len(p.Tokens), kv, r.cfg.MaxKVBytes)}
	}
	calls := callFamily(lm.parser, req)
	out, err := newOutputParser(calls, req, p.Prompt)
	if err != nil {
		return nil, err
	}
	var cons *constraint
	var gram *grammar.Grammar
	switch {
	case req.ToolChoice.Forced() && req.Messages != nil:
		var key [32]byte
		if key, err = toolCallKey(calls, req.Tools, req.ToolChoice, r.cfg.MaxToolCalls); err == nil {
			gram, err = r.grammars.get(key, func() (*grammar.Grammar, error) {
				return toolCallGrammar(calls, req.Tools, req.ToolChoice, r.cfg.MaxToolCalls)
			})
		}
	case req.ResponseFormat != nil:
		gram, err = r.grammars.get(responseFormatKey(req.ResponseFormat), func() (*grammar.Grammar, error) {
			return responseFormatGrammar(req.ResponseFormat)
		})
	}
	if err != nil {
		return nil, err
	}
	params := req.Sampling
	lm.settings().Sampling.Apply(&params)
	params.StopTokenIDs = append(slices.Clone(params.StopTokenIDs), lm.text.Tokenizer().EOS()...)
	smp, err := sample.New(params, lm.model.VocabSize())
	if err != nil {
		return nil, &prompt.InvalidRequestError{Err: err}
	}
	if gram != nil {
		cons = newConstraint(lm, gram, constraintThinking(lm.parser, req, p.Prompt), params.StopTokenIDs)
	}
	maxTokens := req.MaxTokens
	if maxTokens == 0 {
		maxTokens = r.cfg.MaxTokens
	}
	// What the context window leaves after the prompt bounds every
	// generation; when it is the tighter bound, running out of it is
	// reported as such, not as max_tokens.
	room := ctxLen - len(p.Tokens)
	window := maxTokens == 0 || maxTokens > room
	if window {
		maxTokens = room
	}
	g := &generation{
		r: r, ctx: ctx, id: req.ID, lm: lm, prompt: p.Tokens, sampler: smp, params: params,
		maxTokens: maxTokens, window: window, stops: newStopMatcher(req.Stop), out: out, cons: cons,
		dec:    lm.text.Tokenizer().NewStreamDecoder(false),
		usage:  engine.Usage{PromptTokens: len(p.Tokens)},
		prio:   req.Priority,
		events: make(chan engine.Event, 16), notify: make(chan struct{}, 1),
		phases: engine.PhasesFrom(ctx),
	}
	if req.Speculative || lm.settings().Speculative {
		if g.spec, err = r.newSpeculation(lm, params); err != nil {
			return nil, &prompt.InvalidRequestError{Err: err}
		}
	}
	if req.ReasoningBudget > 0 && req.Messages != nil {
		if lm.parser == parser.Harmony {
			g.think = harmonyThinkBudget(lm, req.ReasoningBudget, opened)
		} else {
			g.think = newThinkBudget(lm, req.ReasoningBudget, parser.StartInReasoning(p.Prompt))
		}
	}
	return g, nil
}

// constraintThinking tells where a constrained generation starts: inside
// reasoning when the prompt opened <think>; free to open <think> first when
// the model's family reasons and thinking is not turned off (Qwen3's
// template leaves the choice to the model); else in the document.
func constraintThinking(family string, req *engine.Request, renderedPrompt string) thinking {
	switch {
	case family == parser.Harmony:
		// Only the prompt opens an analysis message (harmonyOpen).
		if req.Messages != nil && strings.HasSuffix(renderedPrompt, harmonyAnalysisHeader) {
			return thinkingInside
		}
		return thinkingOff
	case parser.StartInReasoning(renderedPrompt):
		return thinkingInside
	case req.Messages != nil && (req.EnableThinking == nil || *req.EnableThinking) &&
		slices.Contains(parser.Markers(family), "<think>"):
		return thinkingMay
	case req.Messages != nil && req.EnableThinking != nil && *req.EnableThinking && family == parser.Gemma4:
		// Gemma 4's template closes an empty thought channel in the
		// prompt unless enable_thinking is true; then the model may
		// think before its calls (the template writes a call turn's
		// thought channel before its calls).
		return thinkingMay
	}
	return thinkingOff
}

// generation is one admitted request. Its generation state (sampler,
// decoder, parsers, output) and scheduling state are used only by its
// model's scheduler goroutine; its events go to the client through a
// queue that its delivery goroutine drains.
type generation struct {
	r         *Runner
	ctx       context.Context
	id        string
	lm        *loadedModel
	prompt    []int
	sampler   *sample.Sampler
	params    sample.Params
	maxTokens int
	window    bool // maxTokens is what the context window leaves
	stops     *stopMatcher
	out       parser.Parser // splits text into content, reasoning and tool calls
	calls     int           // tool calls made so far
	cons      *constraint   // nil when the output is unconstrained
	dec       *tokenizer.StreamDecoder
	output    []int // sampled tokens; the last one is not in the KV cache yet
	usage     engine.Usage

	// Scheduling state.
	prio        engine.Priority
	arrived     time.Time // first submitted (kept when preempted)
	arrivedStep int64     // the model's step count when it arrived
	aged        bool      // waited past the starvation bound
	order       int64     // admission order, for picking preemption victims
	seq         sequence  // nil unless running
	kvLen       int       // tokens of prompt+output in seq
	kvAcct      int64     // KV bytes of seq counted in Runner.kvBytes
	busy        bool      // in a micro-batch still in flight (sched.go): not planned, freed or preempted
	release     func()    // the pool's in-flight count on the model
	unwatch     func()    // stops waking the scheduler on cancellation

	// Delivery to the client.
	events  chan engine.Event
	mu      sync.Mutex
	queue   []engine.Event
	notify  chan struct{}
	started time.Time

	think *thinkBudget // nil without a reasoning budget
	pfx   prefixRun    // the prefix cache's part (prefix.go)

	drawn *StageDrawn // the token a pipeline's last stage drew this step

	// phases hears the queue wait, prefill and decode (nil: nobody
	// asked); runAt and firstAt are when the generation first ran and
	// sampled its first token (scheduler goroutine only).
	phases         engine.Phases
	runAt, firstAt time.Time
	spec           *speculation // nil unless the request drafts (speculative.go)
}

// notePhases reports the phases of a generation that ended normally.
func (g *generation) notePhases() {
	if g.phases == nil || g.runAt.IsZero() || g.firstAt.IsZero() {
		return
	}
	g.phases.Phase(engine.PhaseQueue, g.arrived, g.runAt)
	g.phases.Phase(engine.PhasePrefill, g.runAt, g.firstAt)
	g.phases.Phase(engine.PhaseDecode, g.firstAt, time.Now())
}

// pending returns the tokens of prompt+output not yet in the KV cache:
// the rest of the prompt while prefilling, then the last sampled token.
func (g *generation) pending() []int {
	if g.kvLen < len(g.prompt) {
		return append(g.prompt[g.kvLen:len(g.prompt):len(g.prompt)], g.output...)
	}
	return g.output[g.kvLen-len(g.prompt):]
}

func (g *generation) pendingLen() int { return len(g.prompt) + len(g.output) - g.kvLen }

// emit queues ev for the client.
func (g *generation) emit(ev engine.Event) {
	g.mu.Lock()
	g.queue = append(g.queue, ev)
	g.mu.Unlock()
	select {
	case g.notify <- struct{}{}:
	default:
	}
}

// deliver sends the queued events to the client in order until the final
// one (or until the client goes away), then closes the channel.
func (g *generation) deliver() {
	defer close(g.events)
	for {
		select {
		case <-g.notify:
		case <-g.ctx.Done():
			return
		}
		g.mu.Lock()
		evs := g.queue
		g.queue = nil
		g.mu.Unlock()
		for _, ev := range evs {
			select {
			case g.events <- ev:
			case <-g.ctx.Done():
				return
			}
			if ev.Done {
				return
			}
		}
	}
}

// advance samples the next token from the logits after the last pending
// token and returns the event it makes; done is set on the final event.
func (g *generation) advance(logits []float32) (ev engine.Event, done bool, err error) {
	res, err := g.sampler.Sample(g.input(logits))
	if err != nil {
		return ev, true, err
	}
	return g.take(res)
}

// input is the sampler's input for the next token: the logits after the
// last token, the context for the penalties, and the mask in the
// current state of the constraint and reasoning budget.
func (g *generation) input(logits []float32) sample.Input {
	return sample.Input{Logits: logits, Prompt: g.prompt, Output: g.output, Mask: g.mask()}
}

// mask is what the next token may be: the grammar's mask, or only
// </think> once the reasoning budget is spent; nil for any token.
func (g *generation) mask() sample.Mask {
	var m sample.Mask
	if g.cons != nil {
		m = g.cons.mask(g.maxTokens - len(g.output))
	}
	if g.think != nil && g.think.spent() {
		m = g.think.end
	}
	return m
}

// takeDrawn advances by a token a pipeline's last stage drew with this
// generation's sampler state (stageDraw), which the sampler takes over.
func (g *generation) takeDrawn(d *StageDrawn) (ev engine.Event, done bool, err error) {
	if d.Err != nil {
		return ev, true, d.Err
	}
	if d.RNG != nil {
		if err := g.sampler.SetRNGState(d.RNG); err != nil {
			return ev, true, fmt.Errorf("%w: %v", ErrPipelineStage, err)
		}
	}
	if d.ID < 0 || d.ID >= g.lm.model.VocabSize() {
		return ev, true, fmt.Errorf("%w: token %d drawn out of the vocabulary", ErrPipelineStage, d.ID)
	}
	return g.take(d.Result)
}

// take advances by a sampled token and returns the event it makes; done
// is set on the final event.
func (g *generation) take(res sample.Result) (ev engine.Event, done bool, err error) {
	if g.cons != nil && !res.Stop {
		if err := g.cons.accept(res.ID); err != nil {
			return ev, true, err
		}
	}
	if res.Stop {
		g.usage.CompletionTokens = len(g.output)
		return g.finishFlushed(engine.Event{Done: true, FinishReason: engine.FinishStop, Usage: g.usage}, ""), true, nil
	}
	g.output = append(g.output, res.ID)
	g.r.generated.Add(1)
	if g.think != nil {
		g.think.accept(res.ID)
	}
	text, matched := g.stops.Add(g.dec.Add(res.ID))
	ev = engine.Event{Tokens: []engine.TokenLogprob{g.tokenLogprob(res.ID, res.Logprob)}}
	if g.params.TopLogprobs > 0 {
		top := make([]engine.TokenLogprob, len(res.Top))
		for i, t := range res.Top {
			top[i] = g.tokenLogprob(t.ID, t.Logprob)
		}
		ev.TopLogprobs = [][]engine.TokenLogprob{top}
	}
	g.usage.CompletionTokens = len(g.output)
	if matched != "" {
		ev.Done, ev.FinishReason, ev.StopSequence = true, engine.FinishStop, matched
		ev.Usage = g.usage
		return g.finish(ev, text), true, nil
	}
	if len(g.output) >= g.maxTokens {
		ev.FinishReason = engine.FinishLength
		if g.window {
			ev.FinishReason = engine.FinishContextWindow
		}
		return g.finishLength(ev, text), true, nil
	}
	if len(g.output) == 1 {
		ev.Usage = g.usage // the prompt's figures, known once it is in
	}
	g.parse(&ev, g.out.Add(text))
	return ev, false, nil
}

// finishLength ends the generation for length (max_tokens, the context
// window, or a KV budget a lone sequence outgrew), flushing held-back
// text. ev.FinishReason says which; empty is FinishLength.
func (g *generation) finishLength(ev engine.Event, text string) engine.Event {
	ev.Done = true
	if ev.FinishReason == "" {
		ev.FinishReason = engine.FinishLength
	}
	ev.Usage = g.usage
	return g.finishFlushed(ev, text)
}

// finishFlushed ends the generation with the decoder's last bytes (an
// incomplete character comes out as U+FFFD) and the text held back for the
// stop sequences. If that completes a stop sequence, the answer is cut
// there and ends as stopped by it, as it would have a token earlier.
func (g *generation) finishFlushed(ev engine.Event, text string) engine.Event {
	out, matched := g.stops.Add(g.dec.Flush())
	if matched != "" {
		ev.FinishReason, ev.StopSequence = engine.FinishStop, matched
		return g.finish(ev, text+out)
	}
	return g.finish(ev, text+out+g.stops.Flush())
}

// parse moves what the output parser produced into ev.
func (g *generation) parse(ev *engine.Event, o parser.Output) {
	ev.Text += o.Content
	ev.Reasoning += o.Reasoning
	for _, c := range o.Calls {
		ev.ToolCalls = append(ev.ToolCalls, engine.ToolCall{Index: c.Index, ID: c.ID, Name: c.Name, Arguments: c.Arguments, Undeclared: c.Undeclared})
		g.calls++
	}
}

// finish completes the final event: the last text goes through the parser,
// which then flushes what it held back (a malformed tool call comes back
// as content); a generation that stopped normally after tool calls
// finishes with "tool_calls".
func (g *generation) finish(ev engine.Event, text string) engine.Event {
	g.parse(&ev, g.out.Add(text))
	rest, _ := g.out.Finish()
	g.parse(&ev, rest)
	if g.calls > 0 && ev.FinishReason == engine.FinishStop && ev.StopSequence == "" {
		ev.FinishReason = engine.FinishToolCalls
	}
	return ev
}

func (g *generation) tokenLogprob(id int, lp float64) engine.TokenLogprob {
	return engine.TokenLogprob{ID: id, Text: g.lm.text.Tokenizer().Decode([]int{id}, false), Logprob: lp}
}
