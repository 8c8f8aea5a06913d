package flux2

import (
	"errors"
	"fmt"
	"math"
)

// SchedulerConfig is scheduler/scheduler_config.json of a diffusers
// FlowMatchEulerDiscreteScheduler, the fields FLUX.2 uses.
type SchedulerConfig struct {
	ClassName          string   `json:"_class_name"`
	NumTrainTimesteps  int      `json:"num_train_timesteps"`
	Shift              float64  `json:"shift"`
	UseDynamicShifting bool     `json:"use_dynamic_shifting"`
	BaseShift          float64  `json:"base_shift"`
	MaxShift           float64  `json:"max_shift"`
	BaseImageSeqLen    int      `json:"base_image_seq_len"`
	MaxImageSeqLen     int      `json:"max_image_seq_len"`
	InvertSigmas       bool     `json:"invert_sigmas"`
	ShiftTerminal      *float64 `json:"shift_terminal"`
	UseKarrasSigmas    bool     `json:"use_karras_sigmas"`
	UseExponential     bool     `json:"use_exponential_sigmas"`
	UseBetaSigmas      bool     `json:"use_beta_sigmas"`
	TimeShiftType      string   `json:"time_shift_type"`
	StochasticSampling bool     `json:"stochastic_sampling"`
}

// DefaultSchedulerConfig is the scheduler FLUX.2 [klein] checkpoints ship.
func DefaultSchedulerConfig() SchedulerConfig {
	return SchedulerConfig{
		ClassName:          "FlowMatchEulerDiscreteScheduler",
		NumTrainTimesteps:  1000,
		Shift:              3.0,
		UseDynamicShifting: true,
		BaseShift:          0.5,
		MaxShift:           1.15,
		BaseImageSeqLen:    256,
		MaxImageSeqLen:     4096,
		TimeShiftType:      "exponential",
	}
}

// ErrUnsupportedScheduler reports a scheduler setting the engine does not
// implement (karras/exponential/beta sigmas, inverted sigmas, stochastic
// sampling, a terminal shift): FLUX.2 checkpoints use none of them.
var ErrUnsupportedScheduler = errors.New("flux2: unsupported scheduler setting")

func (c SchedulerConfig) check() error {
	switch {
	case c.ClassName != "" && c.ClassName != "FlowMatchEulerDiscreteScheduler":
		return fmt.Errorf("%w: class %s", ErrUnsupportedScheduler, c.ClassName)
	case c.UseKarrasSigmas || c.UseExponential || c.UseBetaSigmas:
		return fmt.Errorf("%w: karras/exponential/beta sigmas", ErrUnsupportedScheduler)
	case c.InvertSigmas || c.StochasticSampling:
		return fmt.Errorf("%w: inverted sigmas or stochastic sampling", ErrUnsupportedScheduler)
	case c.ShiftTerminal != nil && *c.ShiftTerminal != 0:
		return fmt.Errorf("%w: shift_terminal", ErrUnsupportedScheduler)
	case c.TimeShiftType != "" && c.TimeShiftType != "exponential" && c.TimeShiftType != "linear":
		return fmt.Errorf("%w: time_shift_type %q", ErrUnsupportedScheduler, c.TimeShiftType)
	case c.NumTrainTimesteps <= 0:
		return fmt.Errorf("%w: num_train_timesteps %d", ErrUnsupportedScheduler, c.NumTrainTimesteps)
	}
	return nil
}

// EmpiricalMu is FLUX.2's shift for an image of imageSeqLen tokens
// generated in steps steps (diffusers' compute_empirical_mu): a line in
// the step count between the fits at 10 and 200 steps, or the 200-step
// fit alone above 4300 tokens.
func EmpiricalMu(imageSeqLen, steps int) float64 {
	const a1, b1 = 8.73809524e-05, 1.89833333
	const a2, b2 = 0.00016927, 0.45666666
	seq := float64(imageSeqLen)
	if imageSeqLen > 4300 {
		return a2*seq + b2
	}
	m200 := a2*seq + b2
	m10 := a1*seq + b1
	a := (m200 - m10) / 190.0
	b := m200 - 200.0*a
	return a*float64(steps) + b
}

// Schedule is the sigmas and timesteps of one generation.
type Schedule struct {
	// Sigmas has steps+1 values, from the first noise level down to the
	// final 0.
	Sigmas []float32
	// Timesteps has steps values, Sigmas·num_train_timesteps; the
	// transformer is given Timesteps[i]/1000.
	Timesteps []float32
}

// NewSchedule computes what Flux2KleinPipeline sets on its scheduler for
// steps steps over imageSeqLen image tokens: sigmas linspace(1, 1/steps,
// steps), shifted by EmpiricalMu (exponentially, the default, or
// linearly) when the scheduler shifts dynamically, by its fixed shift
// otherwise, in float32 as numpy computes them.
func NewSchedule(c SchedulerConfig, steps, imageSeqLen int) (Schedule, error) {
	if err := c.check(); err != nil {
		return Schedule{}, err
	}
	if steps <= 0 {
		return Schedule{}, fmt.Errorf("flux2: %d steps", steps)
	}
	base := linspace(1, 1/float64(steps), steps)
	s := Schedule{Sigmas: make([]float32, steps+1), Timesteps: make([]float32, steps)}
	mu := EmpiricalMu(imageSeqLen, steps)
	for i, v := range base {
		t := float32(v)
		var sigma float32
		switch {
		case c.UseDynamicShifting && c.TimeShiftType == "linear":
			// mu / (mu + (1/t − 1)^1)
			m := float32(mu)
			sigma = m / (m + (1/t - 1))
		case c.UseDynamicShifting:
			// exp(mu) / (exp(mu) + (1/t − 1)^1)
			e := float32(math.Exp(mu))
			sigma = e / (e + (1/t - 1))
		default:
			sh := float32(c.Shift)
			sigma = float32(sh*t) / (1 + float32((sh-1)*t))
		}
		s.Sigmas[i] = sigma
		s.Timesteps[i] = sigma * float32(c.NumTrainTimesteps)
	}
	return s, nil
}

// linspace is numpy.linspace(start, stop, n) in float64: start + i·step,
// the last value exactly stop.
func linspace(start, stop float64, n int) []float64 {
	out := make([]float64, n)
	if n == 1 {
		out[0] = start
		return out
	}
	step := (stop - start) / float64(n-1)
	for i := range out {
		out[i] = float64(i)*step + start
	}
	out[n-1] = stop
	return out
}

// EulerStep advances latents x by one step of the flow-matching Euler
// scheduler: x + (sigma[i+1] − sigma[i])·v, in float32, in place (v is
// the transformer's velocity prediction, the same shape as x).
func (s Schedule) EulerStep(i int, x, v []float32) {
	dt := s.Sigmas[i+1] - s.Sigmas[i]
	for k := range x {
		// The conversion keeps the product rounded on its own, as torch
		// computes it (no fused multiply-add).
		x[k] += float32(dt * v[k])
	}
}
