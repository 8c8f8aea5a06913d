package sample

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Limits of the request parameters, as the OpenAI API sets them.
const (
	MaxTopLogprobs = 20  // top_logprobs is 0..20
	MaxLogitBias   = 100 // logit_bias values are -100..100
	MaxPenalty     = 2   // presence_penalty and frequency_penalty are -2..2
)

// ErrInvalidParams is wrapped by every error of Params.Validate and
// Params.ValidateVocab: the request is wrong, not the server (HTTP 400).
var ErrInvalidParams = errors.New("invalid sampling parameter")

// ParamError names the request field a validation error is about, so the
// HTTP layer can fill OpenAI's error.param. It wraps ErrInvalidParams.
type ParamError struct {
	Param string // request field name, e.g. "top_p" or "logit_bias"
	Msg   string // what is wrong with it
}

func (e *ParamError) Error() string { return e.Param + ": " + e.Msg }

// Unwrap makes errors.Is(err, ErrInvalidParams) true.
func (e *ParamError) Unwrap() error { return ErrInvalidParams }

func paramErr(param, format string, a ...any) error {
	return &ParamError{Param: param, Msg: fmt.Sprintf(format, a...)}
}

// Params are the sampling parameters of one sequence. The zero value is not
// valid (top_p and repetition_penalty must be positive); start from
// DefaultParams and override what the request sets.
type Params struct {
	// Temperature divides the logits; 0 selects greedy decoding (argmax,
	// ties to the lowest id), which ignores TopK, TopP, MinP and Seed.
	Temperature float64
	// TopK keeps the K most likely tokens; 0 turns it off.
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// sums to at least TopP (nucleus sampling); 1 turns it off.
	TopP float64
	// MinP keeps the tokens whose probability is at least MinP times the
	// probability of the most likely token; 0 turns it off.
	MinP float64

	// RepetitionPenalty (HF/llama.cpp semantics) divides the positive
	// logits and multiplies the negative ones of every distinct token in
	// the last RepetitionWindow tokens of prompt+output; 1 turns it off.
	RepetitionPenalty float64
	// RepetitionWindow is how many of the most recent prompt+output tokens
	// RepetitionPenalty looks at; 0 means all of them.
	RepetitionWindow int
	// PresencePenalty and FrequencyPenalty (OpenAI semantics) subtract
	// PresencePenalty·[count>0] + FrequencyPenalty·count from each logit,
	// where count is how often the token occurs in the generated output.
	// Prompt tokens are not counted, as in OpenAI and vLLM.
	PresencePenalty  float64
	FrequencyPenalty float64
	// LogitBias adds a value in -100..100 to the logit of a token id; -100
	// effectively bans the token and +100 effectively forces it.
	LogitBias map[int]float64

	// Seed makes sampling reproducible: the same seed and the same logits
	// give the same tokens. Nil seeds the generator from crypto/rand.
	Seed *int64
	// StopTokenIDs are reported in Result.Stop when sampled.
	StopTokenIDs []int

	// Logprobs asks for the log-probability of the sampled token, and
	// TopLogprobs (0..20, needs Logprobs) for that many most likely
	// alternatives.
	Logprobs    bool
	TopLogprobs int
}

// DefaultParams returns the parameters with every transform off and
// temperature 1: plain sampling from the model's distribution.
func DefaultParams() Params {
	return Params{Temperature: 1, TopP: 1, RepetitionPenalty: 1}
}

// Greedy reports whether the parameters select the argmax.
func (p Params) Greedy() bool { return p.Temperature == 0 }

// Validate checks the parameters that do not depend on the model. Errors
// are *ParamError values wrapping ErrInvalidParams.
func (p Params) Validate() error {
	switch {
	case !(p.Temperature >= 0) || math.IsInf(p.Temperature, 1):
		return paramErr("temperature", "%v must be a finite number >= 0", p.Temperature)
	case p.TopK < 0:
		return paramErr("top_k", "%d must be >= 0 (0 turns it off)", p.TopK)
	case !(p.TopP > 0 && p.TopP <= 1):
		return paramErr("top_p", "%v must be in (0, 1] (1 turns it off)", p.TopP)
	case !(p.MinP >= 0 && p.MinP <= 1):
		return paramErr("min_p", "%v must be in [0, 1] (0 turns it off)", p.MinP)
	case !(p.RepetitionPenalty > 0) || math.IsInf(p.RepetitionPenalty, 1):
		return paramErr("repetition_penalty", "%v must be a finite number > 0 (1 turns it off)", p.RepetitionPenalty)
	case p.RepetitionWindow < 0:
		return paramErr("repetition_window", "%d must be >= 0 (0 means the whole context)", p.RepetitionWindow)
	case !(p.PresencePenalty >= -MaxPenalty && p.PresencePenalty <= MaxPenalty):
		return paramErr("presence_penalty", "%v must be in [-2, 2]", p.PresencePenalty)
	case !(p.FrequencyPenalty >= -MaxPenalty && p.FrequencyPenalty <= MaxPenalty):
		return paramErr("frequency_penalty", "%v must be in [-2, 2]", p.FrequencyPenalty)
	case p.TopLogprobs < 0 || p.TopLogprobs > MaxTopLogprobs:
		return paramErr("top_logprobs", "%d must be in [0, %d]", p.TopLogprobs, MaxTopLogprobs)
	case p.TopLogprobs > 0 && !p.Logprobs:
		return paramErr("top_logprobs", "needs logprobs to be true")
	}
	for _, id := range sortedKeys(p.LogitBias) {
		if id < 0 {
			return paramErr("logit_bias", "token id %d must be >= 0", id)
		}
		if v := p.LogitBias[id]; !(v >= -MaxLogitBias && v <= MaxLogitBias) {
			return paramErr("logit_bias", "bias %v of token %d must be in [-100, 100]", v, id)
		}
	}
	for _, id := range p.StopTokenIDs {
		if id < 0 {
			return paramErr("stop_token_ids", "token id %d must be >= 0", id)
		}
	}
	return nil
}

// ValidateVocab runs Validate and checks that every token id the
// parameters name is below vocabSize, the length of a logits row.
func (p Params) ValidateVocab(vocabSize int) error {
	if err := p.Validate(); err != nil {
		return err
	}
	for _, id := range sortedKeys(p.LogitBias) {
		if id >= vocabSize {
			return paramErr("logit_bias", "token id %d is out of range: the vocabulary has %d tokens", id, vocabSize)
		}
	}
	for _, id := range p.StopTokenIDs {
		if id >= vocabSize {
			return paramErr("stop_token_ids", "token id %d is out of range: the vocabulary has %d tokens", id, vocabSize)
		}
	}
	return nil
}

// sortedKeys makes validation report the same error for the same map.
func sortedKeys(m map[int]float64) []int {
	if len(m) == 0 {
		return nil
	}
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
