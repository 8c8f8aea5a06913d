package sample

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name  string
		set   func(*Params)
		param string // "" if valid
	}{
		{"defaults", func(p *Params) {}, ""},
		{"greedy", func(p *Params) { p.Temperature = 0 }, ""},
		{"everything on", func(p *Params) {
			p.Temperature, p.TopK, p.TopP, p.MinP = 0.7, 40, 0.9, 0.05
			p.RepetitionPenalty, p.RepetitionWindow = 1.1, 64
			p.PresencePenalty, p.FrequencyPenalty = -2, 2
			p.LogitBias = map[int]float64{0: -100, 99: 100}
			p.StopTokenIDs = []int{0, 99}
			p.Logprobs, p.TopLogprobs = true, 20
		}, ""},
		{"negative temperature", func(p *Params) { p.Temperature = -0.1 }, "temperature"},
		{"NaN temperature", func(p *Params) { p.Temperature = nan }, "temperature"},
		{"infinite temperature", func(p *Params) { p.Temperature = math.Inf(1) }, "temperature"},
		{"negative top_k", func(p *Params) { p.TopK = -1 }, "top_k"},
		{"top_p 0", func(p *Params) { p.TopP = 0 }, "top_p"},
		{"top_p above 1", func(p *Params) { p.TopP = 1.01 }, "top_p"},
		{"NaN top_p", func(p *Params) { p.TopP = nan }, "top_p"},
		{"negative min_p", func(p *Params) { p.MinP = -0.01 }, "min_p"},
		{"min_p above 1", func(p *Params) { p.MinP = 1.5 }, "min_p"},
		{"repetition_penalty 0", func(p *Params) { p.RepetitionPenalty = 0 }, "repetition_penalty"},
		{"negative repetition_penalty", func(p *Params) { p.RepetitionPenalty = -1 }, "repetition_penalty"},
		{"NaN repetition_penalty", func(p *Params) { p.RepetitionPenalty = nan }, "repetition_penalty"},
		{"negative repetition_window", func(p *Params) { p.RepetitionWindow = -1 }, "repetition_window"},
		{"presence_penalty below -2", func(p *Params) { p.PresencePenalty = -2.01 }, "presence_penalty"},
		{"presence_penalty above 2", func(p *Params) { p.PresencePenalty = 3 }, "presence_penalty"},
		{"NaN presence_penalty", func(p *Params) { p.PresencePenalty = nan }, "presence_penalty"},
		{"frequency_penalty above 2", func(p *Params) { p.FrequencyPenalty = 2.5 }, "frequency_penalty"},
		{"frequency_penalty below -2", func(p *Params) { p.FrequencyPenalty = -7 }, "frequency_penalty"},
		{"negative logit_bias id", func(p *Params) { p.LogitBias = map[int]float64{-1: 1} }, "logit_bias"},
		{"logit_bias id out of vocab", func(p *Params) { p.LogitBias = map[int]float64{100: 1} }, "logit_bias"},
		{"logit_bias below -100", func(p *Params) { p.LogitBias = map[int]float64{3: -100.5} }, "logit_bias"},
		{"logit_bias above 100", func(p *Params) { p.LogitBias = map[int]float64{3: 101} }, "logit_bias"},
		{"NaN logit_bias", func(p *Params) { p.LogitBias = map[int]float64{3: nan} }, "logit_bias"},
		{"negative stop id", func(p *Params) { p.StopTokenIDs = []int{-2} }, "stop_token_ids"},
		{"stop id out of vocab", func(p *Params) { p.StopTokenIDs = []int{1, 100} }, "stop_token_ids"},
		{"top_logprobs above 20", func(p *Params) { p.Logprobs, p.TopLogprobs = true, 21 }, "top_logprobs"},
		{"negative top_logprobs", func(p *Params) { p.TopLogprobs = -1 }, "top_logprobs"},
		{"top_logprobs without logprobs", func(p *Params) { p.TopLogprobs = 3 }, "top_logprobs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := params(tt.set)
			err := p.ValidateVocab(100)
			if _, newErr := New(p, 100); (newErr == nil) != (err == nil) {
				t.Errorf("New and ValidateVocab disagree: %v, %v", newErr, err)
			}
			if tt.param == "" {
				if err != nil {
					t.Errorf("unexpected error %v", err)
				}
				return
			}
			var pe *ParamError
			if !errors.As(err, &pe) || !errors.Is(err, ErrInvalidParams) {
				t.Fatalf("got %v, want a *ParamError wrapping ErrInvalidParams", err)
			}
			if pe.Param != tt.param || !strings.HasPrefix(err.Error(), tt.param+": ") {
				t.Errorf("error %q names %q, want %q", err, pe.Param, tt.param)
			}
			// Only the vocabulary checks need the vocabulary.
			vocabOnly := strings.Contains(tt.name, "out of vocab")
			if plain := p.Validate(); (plain == nil) != vocabOnly {
				t.Errorf("Validate() = %v", plain)
			}
		})
	}
	if _, err := New(DefaultParams(), 0); err == nil {
		t.Error("vocabulary size 0 accepted")
	}
	if !(Params{}).Greedy() || DefaultParams().Greedy() {
		t.Error("Greedy is not temperature == 0")
	}
	if err := (Params{}).Validate(); err == nil {
		t.Error("zero Params accepted")
	}
}
