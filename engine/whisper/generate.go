package whisper

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
)

// genOptions are the per-window decoding settings (ctranslate2's
// WhisperOptions as faster-whisper passes them).
type genOptions struct {
	temperature    float64
	bestOf         int // samples drawn at temperature > 0
	suppressBlank  bool
	maxInitialTS   int // max_initial_timestamp_index
	maxLength      int // prompt + generated tokens
	maxNew         int // generated tokens at most, if > 0
	withTimestamps bool
}

// generation is one window's decoded tokens (without <|endoftext|>).
type generation struct {
	tokens       []int
	sumLogprob   float64 // of the tokens and the end token
	noSpeechProb float64
}

// generate decodes one window after prompt (the last token of which is
// the first one fed at step 0, as ctranslate2 does), greedily at
// temperature 0 and else drawing bestOf samples and keeping the one of
// highest length-normalised log probability.
func (m *Model) generate(ctx context.Context, w *Window, prompt []int, o genOptions, rng *rand.Rand) (generation, error) {
	runs := 1
	if o.temperature > 0 {
		runs = max(1, o.bestOf)
	}
	var best generation
	bestScore := math.Inf(-1)
	for r := range runs {
		w.Reset()
		g, err := m.generateOne(ctx, w, prompt, o, rng)
		if err != nil {
			return g, err
		}
		score := g.sumLogprob / float64(max(1, len(g.tokens)))
		if r == 0 || score > bestScore {
			best, bestScore = g, score
		}
	}
	return best, nil
}

func (m *Model) generateOne(ctx context.Context, w *Window, prompt []int, o genOptions, rng *rand.Rand) (generation, error) {
	var g generation
	t := m.Tokens
	sot := slices.Index(prompt, t.SOT)
	rows := []int{len(prompt) - 1}
	if sot >= 0 && sot != len(prompt)-1 {
		rows = []int{sot, len(prompt) - 1}
	}
	logits, err := w.Decode(ctx, prompt, rows)
	if err != nil {
		return g, err
	}
	V := m.Dims.Vocab
	if sot >= 0 {
		g.noSpeechProb = softmaxAt(logits[:V], t.NoSpeech)
	}
	logits = logits[len(logits)-V:]
	startStep := len(prompt) - 1
	maxSteps := min(o.maxLength/2, o.maxLength-startStep)
	if o.maxNew > 0 {
		maxSteps = min(maxSteps, o.maxNew)
	}
	suppress := m.suppressed()
	for step := 0; step < maxSteps; step++ {
		m.applyRules(logits, g.tokens, step, suppress, o)
		logSoftmax(logits)
		var tok int
		if o.temperature > 0 {
			tok = sample(logits, o.temperature, rng)
		} else {
			tok = argmax(logits)
		}
		g.sumLogprob += float64(logits[tok])
		if tok == t.EOT {
			break
		}
		g.tokens = append(g.tokens, tok)
		if step+1 == maxSteps {
			break
		}
		if logits, err = w.Decode(ctx, []int{tok}, []int{0}); err != nil {
			return g, err
		}
	}
	return g, nil
}

// applyRules sets to −∞ the logits of the tokens that may not come next:
// the suppressed tokens, the blank and end tokens first, and
// ctranslate2's timestamp rules (ApplyTimestampRules): no
// <|notimestamps|>; a timestamp first, not beyond max_initial_timestamp;
// timestamps in pairs except before the end; never decreasing; and a
// timestamp when the timestamps together are likelier than any one text
// token.
func (m *Model) applyRules(logits []float32, seq []int, step int, suppress []int, o genOptions) {
	t := m.Tokens
	neg := float32(math.Inf(-1))
	off := func(from, to int) { // [from, to)
		for i := max(from, 0); i < min(to, len(logits)); i++ {
			logits[i] = neg
		}
	}
	for _, id := range suppress {
		logits[id] = neg
	}
	if step == 0 && o.suppressBlank {
		for _, id := range m.Config.SuppressIDsBegin {
			if id >= 0 && id < len(logits) {
				logits[id] = neg
			}
		}
	}
	if !o.withTimestamps {
		return
	}
	tb, last := t.TimestampBegin, len(logits)-1
	logits[t.NoTimestamps] = neg
	check := false
	switch {
	case step == 0:
		off(0, tb)
		off(tb+o.maxInitialTS+1, last+1)
	case seq[step-1] >= tb:
		prev := seq[step-1]
		penult := prev
		if step >= 2 {
			penult = seq[step-2]
		}
		if penult >= tb {
			off(tb, last+1)
		} else {
			off(0, t.EOT)
			off(tb, prev)
			check = true
		}
	default:
		check = true
		for i := step - 1; i >= 0; i-- {
			if seq[i] >= tb {
				off(tb, seq[i]+1)
				break
			}
		}
	}
	if check {
		lp := slices.Clone(logits)
		logSoftmax(lp)
		maxText := math.Inf(-1)
		for _, v := range lp[:tb] {
			maxText = max(maxText, float64(v))
		}
		if logSumExp(lp[tb:]) > maxText {
			off(0, tb)
		}
	}
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// logSoftmax replaces x by its log-softmax (−∞ stays −∞), in float64.
func logSoftmax(x []float32) {
	top := math.Inf(-1)
	for _, v := range x {
		top = max(top, float64(v))
	}
	var sum float64
	for _, v := range x {
		sum += math.Exp(float64(v) - top)
	}
	lse := top + math.Log(sum)
	for i, v := range x {
		x[i] = float32(float64(v) - lse)
	}
}

func logSumExp(x []float32) float64 {
	top := math.Inf(-1)
	for _, v := range x {
		top = max(top, float64(v))
	}
	if math.IsInf(top, -1) {
		return top
	}
	var sum float64
	for _, v := range x {
		sum += math.Exp(float64(v) - top)
	}
	return top + math.Log(sum)
}

// softmaxAt is softmax(x)[i].
func softmaxAt(x []float32, i int) float64 {
	return math.Exp(float64(x[i]) - logSumExp(x))
}

// sample draws a token from softmax(logprobs/temperature).
func sample(logprobs []float32, temperature float64, rng *rand.Rand) int {
	top := math.Inf(-1)
	for _, v := range logprobs {
		top = max(top, float64(v))
	}
	var sum float64
	p := make([]float64, len(logprobs))
	for i, v := range logprobs {
		p[i] = math.Exp((float64(v) - top) / temperature)
		sum += p[i]
	}
	u := rng.Float64() * sum
	for i, v := range p {
		if u < v {
			return i
		}
		u -= v
	}
	return argmax(logprobs)
}
