package sample

import "fmt"

// penalties applies repetition, presence and frequency penalties and the
// logit bias to a row of logits. Its scratch is reused across calls.
type penalties struct {
	repeat              float64
	window              int
	presence, frequency float64
	bias                []biasEntry // sorted by id

	slot    []int32 // per token id: 1 + index into entries, 0 if absent
	entries []penaltyEntry
}

type biasEntry struct {
	id int
	v  float64
}

// penaltyEntry is one distinct token of the context.
type penaltyEntry struct {
	id       int32
	repeated bool  // in the repetition window
	count    int32 // occurrences in the output
}

func newPenalties(p Params) penalties {
	pen := penalties{
		repeat:    p.RepetitionPenalty,
		window:    p.RepetitionWindow,
		presence:  p.PresencePenalty,
		frequency: p.FrequencyPenalty,
	}
	for _, id := range sortedKeys(p.LogitBias) {
		if v := p.LogitBias[id]; v != 0 {
			pen.bias = append(pen.bias, biasEntry{id, v})
		}
	}
	return pen
}

// changes reports whether apply would change any logit.
func (p *penalties) changes(prompt, output []int) bool {
	return len(p.bias) > 0 ||
		p.repeat != 1 && len(prompt)+len(output) > 0 ||
		(p.presence != 0 || p.frequency != 0) && len(output) > 0
}

// apply changes logits in place, in this order: repetition penalty,
// presence and frequency penalties, logit bias. Each distinct token is
// penalised once, whatever its number of occurrences (the frequency
// penalty is proportional to it).
func (p *penalties) apply(logits []float32, prompt, output []int) error {
	if p.repeat != 1 {
		wp, wo := repetitionWindow(prompt, output, p.window)
		if err := p.collect(wp, len(logits), true); err != nil {
			return fmt.Errorf("prompt: %w", err)
		}
		if err := p.collect(wo, len(logits), true); err != nil {
			return fmt.Errorf("output: %w", err)
		}
	}
	if p.presence != 0 || p.frequency != 0 {
		if err := p.collect(output, len(logits), false); err != nil {
			return fmt.Errorf("output: %w", err)
		}
	}
	for _, e := range p.entries {
		v := float64(logits[e.id])
		if e.repeated {
			if v > 0 {
				v /= p.repeat
			} else {
				v *= p.repeat
			}
		}
		if e.count > 0 {
			v -= p.presence + p.frequency*float64(e.count)
		}
		logits[e.id] = float32(v)
	}
	p.reset()
	for _, b := range p.bias {
		logits[b.id] = float32(float64(logits[b.id]) + b.v)
	}
	return nil
}

// collect records ids as repeated (repeat) or counts their occurrences.
func (p *penalties) collect(ids []int, vocab int, repeat bool) error {
	if p.slot == nil {
		p.slot = make([]int32, vocab)
	}
	for _, id := range ids {
		if id < 0 || id >= vocab {
			p.reset()
			return fmt.Errorf("token id %d out of range [0, %d)", id, vocab)
		}
		s := p.slot[id]
		if s == 0 {
			p.entries = append(p.entries, penaltyEntry{id: int32(id)})
			s = int32(len(p.entries))
			p.slot[id] = s
		}
		e := &p.entries[s-1]
		if repeat {
			e.repeated = true
		} else {
			e.count++
		}
	}
	return nil
}

// reset clears the slots of the collected entries.
func (p *penalties) reset() {
	for _, e := range p.entries {
		p.slot[e.id] = 0
	}
	p.entries = p.entries[:0]
}

// repetitionWindow returns the parts of prompt and output that are among
// their last n tokens (n == 0: all of them).
func repetitionWindow(prompt, output []int, n int) (wp, wo []int) {
	switch {
	case n == 0 || n >= len(prompt)+len(output):
		return prompt, output
	case n <= len(output):
		return nil, output[len(output)-n:]
	default:
		return prompt[len(prompt)-(n-len(output)):], output
	}
}
