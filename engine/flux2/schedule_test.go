package flux2

import (
	"errors"
	"fmt"
	"math"
	"testing"
)

// TestScheduleMatchesDiffusers: sigmas and timesteps equal bit for bit
// what Flux2KleinPipeline sets on FlowMatchEulerDiscreteScheduler, for
// 1 to 50 steps and 16 to 9216 image tokens (both branches of the
// empirical mu), and Euler steps on randn latents and velocities end on
// the same latents.
func TestScheduleMatchesDiffusers(t *testing.T) {
	ref := reference(t)
	for i, c := range refRequest.Schedule {
		want := ref.Schedule[i]
		name := fmt.Sprintf("%d steps, %d tokens", c.Steps, c.Seq)
		if mu := EmpiricalMu(c.Seq, c.Steps); mu != want.Mu {
			t.Errorf("%s: mu %v, diffusers %v", name, mu, want.Mu)
		}
		s, err := NewSchedule(DefaultSchedulerConfig(), c.Steps, c.Seq)
		if err != nil {
			t.Fatal(err)
		}
		sameBits(t, name+" sigmas", s.Sigmas, want.Sigmas)
		sameBits(t, name+" timesteps", s.Timesteps, want.Timesteps)
		g := NewGenerator(c.Seed)
		x := g.Randn(c.Seq * c.Ch)
		for k := range s.Timesteps {
			s.EulerStep(k, x, g.Randn(c.Seq*c.Ch))
		}
		sameBits(t, name+" latents after the steps", x, want.Final)
	}
}

// TestScheduleShapes: the schedule falls from 1 to 0; the fixed shift is
// used without dynamic shifting; bad settings are errors.
func TestScheduleShapes(t *testing.T) {
	s, err := NewSchedule(DefaultSchedulerConfig(), 4, 16)
	if err != nil {
		t.Fatal(err)
	}
	if s.Sigmas[0] != 1 || s.Sigmas[4] != 0 || len(s.Timesteps) != 4 {
		t.Errorf("sigmas %v, timesteps %v", s.Sigmas, s.Timesteps)
	}
	for i := 1; i < len(s.Sigmas); i++ {
		if s.Sigmas[i] >= s.Sigmas[i-1] {
			t.Errorf("sigmas not falling: %v", s.Sigmas)
		}
	}
	fixed := DefaultSchedulerConfig()
	fixed.UseDynamicShifting = false
	f, err := NewSchedule(fixed, 2, 16)
	if err != nil {
		t.Fatal(err)
	}
	// shift 3 at sigma 0.5: 1.5/2
	if math.Abs(float64(f.Sigmas[1])-0.75) > 1e-7 {
		t.Errorf("fixed shift: sigmas %v", f.Sigmas)
	}
	one := 0.5
	for _, c := range []struct {
		name string
		mod  func(*SchedulerConfig)
	}{
		{"karras", func(c *SchedulerConfig) { c.UseKarrasSigmas = true }},
		{"stochastic", func(c *SchedulerConfig) { c.StochasticSampling = true }},
		{"terminal", func(c *SchedulerConfig) { c.ShiftTerminal = &one }},
		{"class", func(c *SchedulerConfig) { c.ClassName = "DDIMScheduler" }},
		{"shift type", func(c *SchedulerConfig) { c.TimeShiftType = "cubic" }},
	} {
		cfg := DefaultSchedulerConfig()
		c.mod(&cfg)
		if _, err := NewSchedule(cfg, 4, 16); !errors.Is(err, ErrUnsupportedScheduler) {
			t.Errorf("%s: err %v", c.name, err)
		}
	}
	if _, err := NewSchedule(DefaultSchedulerConfig(), 0, 16); err == nil {
		t.Error("0 steps accepted")
	}
}
