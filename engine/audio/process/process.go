// Package process holds the signal-processing tasks of POST
// /v1/audio/process that need no model: resampling, loudness
// normalization to a target per ITU-R BS.1770-4, and trimming of leading
// and trailing silence; and the 16-bit PCM WAV encoding of the result.
package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"

	"fusion/engine/audio"
	"fusion/engine/audio/resample"
)

// Tasks are the task names Run takes, in the order an error lists them.
var Tasks = []string{"resample", "normalize", "trim"}

// ErrTask: the task is not one Run knows; ErrParams: a parameter is out
// of range or the signal is too short for the task (both the request's
// mistake). A parameter's error is a *ParamError, which names it.
var (
	ErrTask   = errors.New("unknown audio processing task")
	ErrParams = errors.New("invalid audio processing parameters")
)

// ParamError is a parameter out of range: Param is its name
// ("sample_rate", "target_lufs", "threshold_db"). It matches ErrParams.
type ParamError struct {
	Param string
	Msg   string
}

func (e *ParamError) Error() string { return fmt.Sprintf("%v: %s %s", ErrParams, e.Param, e.Msg) }

// Unwrap makes a ParamError match ErrParams.
func (e *ParamError) Unwrap() error { return ErrParams }

// The parameters' defaults, taken when a Params field is nil.
const (
	DefaultSampleRate  = audio.SpeechRate
	DefaultTargetLUFS  = -23.0
	DefaultThresholdDB = -50.0
)

// Params are the tasks' settings; a nil field takes its default, and a
// set one is checked as given (0 is a value like any other).
type Params struct {
	// SampleRate is resample's target rate, 8 000 to 192 000 Hz
	// (default 16 000).
	SampleRate *int
	// TargetLUFS is normalize's target integrated loudness, −70 to 0
	// LUFS (default −23, EBU R 128); 0 LUFS is a legal (very loud)
	// target.
	TargetLUFS *float64
	// ThresholdDB is trim's silence level, in dB relative to full scale
	// of the 10-ms frames' RMS, −120 up to but not including 0 (default
	// −50): at 0 dBFS only a full-scale square wave would count as
	// sound, so every real signal would trim to nothing.
	ThresholdDB *float64
}

// or is *p, or def when p is nil.
func or[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// Result is a processed signal and what was measured on it.
type Result struct {
	Signal audio.Signal
	// InputLUFS and OutputLUFS are the integrated loudness before and
	// after normalize (NaN for the other tasks).
	InputLUFS, OutputLUFS float64
}

// Run applies task to s.
func Run(ctx context.Context, task string, s audio.Signal, p Params) (*Result, error) {
	if s.Channels <= 0 || s.Rate <= 0 {
		return nil, fmt.Errorf("%w: a signal of %d channels at %d Hz", ErrParams, s.Channels, s.Rate)
	}
	res := &Result{InputLUFS: math.NaN(), OutputLUFS: math.NaN()}
	switch task {
	case "resample":
		rate := or(p.SampleRate, DefaultSampleRate)
		if rate < 8000 || rate > 192000 {
			return nil, &ParamError{"sample_rate", fmt.Sprintf("%d (expected 8000 to 192000)", rate)}
		}
		out, err := Resample(ctx, s, rate)
		if err != nil {
			return nil, err
		}
		res.Signal = out
	case "normalize":
		target := or(p.TargetLUFS, DefaultTargetLUFS)
		if !(target >= -70 && target <= 0) {
			return nil, &ParamError{"target_lufs", fmt.Sprintf("%v (expected -70 to 0)", target)}
		}
		in, err := Loudness(s)
		if err != nil {
			return nil, err
		}
		if math.IsInf(in, -1) {
			return nil, fmt.Errorf("%w: the audio is silent; its loudness cannot be raised to %v LUFS", ErrParams, target)
		}
		gain := float32(math.Pow(10, (target-in)/20))
		out := audio.Signal{Rate: s.Rate, Channels: s.Channels, Samples: make([]float32, len(s.Samples))}
		for i, v := range s.Samples {
			out.Samples[i] = v * gain
		}
		res.Signal, res.InputLUFS = out, in
		if res.OutputLUFS, err = Loudness(out); err != nil {
			return nil, err
		}
	case "trim":
		th := or(p.ThresholdDB, DefaultThresholdDB)
		if !(th >= -120 && th < 0) {
			return nil, &ParamError{"threshold_db", fmt.Sprintf("%v (expected -120 to below 0)", th)}
		}
		res.Signal = Trim(s, th)
	default:
		return nil, fmt.Errorf("%w %q", ErrTask, task)
	}
	return res, nil
}

// Resample brings every channel of s to rate with package resample's
// default filter.
func Resample(ctx context.Context, s audio.Signal, rate int) (audio.Signal, error) {
	r, err := resample.New(s.Rate, rate, resample.Spec{})
	if err != nil {
		return audio.Signal{}, fmt.Errorf("%w: %v", ErrParams, err)
	}
	ch := s.Channels
	var out []float32
	for c := range ch {
		x := make([]float32, s.Frames())
		for i := range x {
			x[i] = s.Samples[i*ch+c]
		}
		y, err := r.Resample(ctx, x)
		if err != nil {
			return audio.Signal{}, err
		}
		if out == nil {
			out = make([]float32, len(y)*ch)
		}
		for i, v := range y {
			out[i*ch+c] = v
		}
	}
	return audio.Signal{Rate: rate, Channels: ch, Samples: out}, nil
}

// Trim drops the leading and trailing 10-ms frames whose RMS (over all
// channels) is below thresholdDB relative to full scale; a signal with
// no frame above it trims to nothing.
func Trim(s audio.Signal, thresholdDB float64) audio.Signal {
	ch, n := s.Channels, s.Frames()
	hop := max(1, s.Rate/100)
	level := math.Pow(10, thresholdDB/20)
	loud := func(start int) bool {
		end := min(n, start+hop)
		var sum float64
		for i := start * ch; i < end*ch; i++ {
			sum += float64(s.Samples[i]) * float64(s.Samples[i])
		}
		return math.Sqrt(sum/float64((end-start)*ch)) >= level
	}
	first, last := -1, -1
	for f := 0; f < n; f += hop {
		if loud(f) {
			if first < 0 {
				first = f
			}
			last = min(n, f+hop)
		}
	}
	out := audio.Signal{Rate: s.Rate, Channels: ch}
	if first >= 0 {
		out.Samples = append([]float32(nil), s.Samples[first*ch:last*ch]...)
	}
	return out
}

// WAV encodes s as 16-bit PCM WAV (values clipped to [−1, 1]).
func WAV(s audio.Signal) ([]byte, error) {
	var b bytes.Buffer
	if err := audio.WriteWAVHeaderChannels(&b, s.Rate, s.Channels, s.Frames()); err != nil {
		return nil, err
	}
	pcm := make([]int16, len(s.Samples))
	for i, v := range s.Samples {
		pcm[i] = int16(math.Round(math.Max(-1, math.Min(1, float64(v))) * 32767))
	}
	if err := audio.WritePCM16(&b, pcm); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
