package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"fusion/engine"
	"fusion/engine/grammar"
	"fusion/engine/parser"
	"fusion/engine/prompt"
	"fusion/engine/sample"
)

// languageModel is what the runner needs of a loaded model.
type languageModel interface {
	VocabSize() int
	ContextLength() int
	// NewSequence makes a sequence that may hold maxLen positions.
	NewSequence(maxLen int) (sequence, error)
	WeightBytes() int64
	KVBytes() int64
	Close() error
}

// sequence is one generation's state in a model (its KV cache).
type sequence interface {
	// Forward runs tokens at the sequence's next positions and returns the
	// logits of the last one (valid until the next call).
	Forward(ctx context.Context, tokens []int) ([]float32, error)
	Release()
}

// loader loads a model's weights.
type loader interface {
	load(info engine.ModelInfo) (languageModel, error)
}

// Generate admits req and streams its events. Errors before admission:
// engine.ErrModelNotFound, engine.ErrUnavailable, engine.ErrOverloaded,
// and *prompt.InvalidRequestError for a request the model cannot take.
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
	if req.MaxTokens > r.cfg.MaxTokens {
		return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("max_tokens %d is over this server's limit of %d", req.MaxTokens, r.cfg.MaxTokens)}
	}
	e, err := r.entry(req.Model)
	if err != nil {
		return nil, err
	}
	lm, err := r.load(e)
	if err != nil {
		return nil, err
	}
	var p prompt.Result
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
	ctxLen := lm.model.ContextLength()
	if len(p.Tokens) == 0 {
		return nil, &prompt.InvalidRequestError{Err: errors.New("the prompt is empty")}
	}
	if len(p.Tokens) >= ctxLen {
		return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("the prompt is %d tokens; this model's context is %d", len(p.Tokens), ctxLen)}
	}
	out, err := newOutputParser(lm.parser, req, p.Prompt)
	if err != nil {
		return nil, err
	}
	var cons *constraint
	var gram *grammar.Grammar
	switch {
	case req.ToolChoice.Forced() && req.Messages != nil:
		gram, err = toolCallGrammar(lm.parser, req.Tools, req.ToolChoice, r.cfg.MaxToolCalls)
	case req.ResponseFormat != nil:
		gram, err = responseFormatGrammar(req.ResponseFormat)
	}
	if err != nil {
		return nil, err
	}
	if gram != nil {
		cons = newConstraint(lm, gram, parser.StartInReasoning(p.Prompt))
	}
	params := req.Sampling
	params.StopTokenIDs = append(slices.Clone(params.StopTokenIDs), lm.text.Tokenizer().EOS()...)
	smp, err := sample.New(params, lm.model.VocabSize())
	if err != nil {
		return nil, &prompt.InvalidRequestError{Err: err}
	}
	if n := r.inFlight.Add(1); n > int64(r.cfg.MaxQueued) {
		r.inFlight.Add(-1)
		return nil, fmt.Errorf("%w: %d requests in flight (limit %d)", engine.ErrOverloaded, n-1, r.cfg.MaxQueued)
	}
	maxTokens := req.MaxTokens
	if maxTokens == 0 {
		maxTokens = r.cfg.MaxTokens
	}
	g := &generation{
		r: r, e: e, lm: lm, prompt: p.Tokens, sampler: smp, params: params,
		maxTokens: min(maxTokens, ctxLen-len(p.Tokens)), stops: newStopMatcher(req.Stop), out: out, cons: cons,
		events: make(chan engine.Event, 16),
	}
	if req.ReasoningBudget > 0 && req.Messages != nil {
		g.think = newThinkBudget(lm, req.ReasoningBudget, parser.StartInReasoning(p.Prompt))
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(g.events)
		// The final event goes out after the sequence and the slot are
		// freed, so a client that saw it can count on the capacity.
		final, ok := g.run(ctx)
		r.inFlight.Add(-1)
		if ok {
			g.send(ctx, final)
		} else {
			r.cancelled.Add(1)
		}
	}()
	return g.events, nil
}

// generation is one admitted request.
type generation struct {
	r         *Runner
	e         *entry
	lm        *loadedModel
	prompt    []int
	sampler   *sample.Sampler
	params    sample.Params
	maxTokens int
	stops     *stopMatcher
	out       parser.Parser // splits text into content, reasoning and tool calls
	calls     int           // tool calls made so far
	cons      *constraint   // nil when the output is unconstrained
	think     *thinkBudget  // nil without a reasoning budget
	events    chan engine.Event
}

// send delivers ev unless the client went away.
func (g *generation) send(ctx context.Context, ev engine.Event) bool {
	select {
	case g.events <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// failed is the final event of a generation that hit err; ok is false when
// the client went away (nothing to send).
func failed(ctx context.Context, err error) (engine.Event, bool) {
	if ctx.Err() != nil {
		return engine.Event{}, false
	}
	return engine.Event{Done: true, Err: err}, true
}

// run generates until a stop condition and returns the final event; the
// deltas before it are sent from here. ok is false when the client went
// away.
func (g *generation) run(ctx context.Context) (final engine.Event, ok bool) {
	// Wait for the model's turn.
	select {
	case g.e.turn <- struct{}{}:
		defer func() { <-g.e.turn }()
	case <-ctx.Done():
		return engine.Event{}, false
	}
	seq, err := g.lm.model.NewSequence(len(g.prompt) + g.maxTokens)
	if err != nil {
		return failed(ctx, err)
	}
	defer seq.Release()

	var logits []float32
	for start := 0; start < len(g.prompt); start += g.r.cfg.PrefillChunk {
		if ctx.Err() != nil {
			return engine.Event{}, false
		}
		end := min(start+g.r.cfg.PrefillChunk, len(g.prompt))
		if logits, err = seq.Forward(ctx, g.prompt[start:end]); err != nil {
			return failed(ctx, err)
		}
	}

	tok := g.lm.text.Tokenizer()
	dec := tok.NewStreamDecoder(false)
	var output []int
	usage := engine.Usage{PromptTokens: len(g.prompt)}
	for {
		if ctx.Err() != nil {
			return engine.Event{}, false
		}
		in := sample.Input{Logits: logits, Prompt: g.prompt, Output: output}
		if g.cons != nil {
			in.Mask = g.cons.mask(g.maxTokens - len(output))
		}
		if g.think != nil && g.think.spent() {
			in.Mask = g.think.end
		}
		res, err := g.sampler.Sample(in)
		if err != nil {
			return failed(ctx, err)
		}
		if g.cons != nil && !res.Stop {
			if err := g.cons.accept(res.ID); err != nil {
				return failed(ctx, err)
			}
		}
		if res.Stop {
			out, _ := g.stops.Add(dec.Flush())
			usage.CompletionTokens = len(output)
			return g.finish(engine.Event{Done: true, FinishReason: engine.FinishStop, Usage: usage}, out+g.stops.Flush()), true
		}
		output = append(output, res.ID)
		if g.think != nil {
			g.think.accept(res.ID)
		}
		text, matched := g.stops.Add(dec.Add(res.ID))
		ev := engine.Event{Tokens: []engine.TokenLogprob{g.tokenLogprob(res.ID, res.Logprob)}}
		if g.params.TopLogprobs > 0 {
			top := make([]engine.TokenLogprob, len(res.Top))
			for i, t := range res.Top {
				top[i] = g.tokenLogprob(t.ID, t.Logprob)
			}
			ev.TopLogprobs = [][]engine.TokenLogprob{top}
		}
		if matched != "" {
			ev.Done, ev.FinishReason, ev.StopSequence = true, engine.FinishStop, matched
			usage.CompletionTokens = len(output)
			ev.Usage = usage
			return g.finish(ev, text), true
		}
		if len(output) >= g.maxTokens {
			out, _ := g.stops.Add(dec.Flush())
			ev.Done, ev.FinishReason = true, engine.FinishLength
			usage.CompletionTokens = len(output)
			ev.Usage = usage
			return g.finish(ev, text+out+g.stops.Flush()), true
		}
		g.parse(&ev, g.out.Add(text))
		if !g.send(ctx, ev) {
			return engine.Event{}, false
		}
		if logits, err = seq.Forward(ctx, []int{res.ID}); err != nil {
			return failed(ctx, err)
		}
	}
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
