package silero

import (
	"context"
	"fmt"
	"math"
)

// Options are faster-whisper's VadOptions: how speech probabilities
// become segments. The zero value is not valid; start from
// DefaultOptions.
type Options struct {
	// Threshold: a chunk whose probability is at least this is speech.
	Threshold float64
	// NegThreshold: below this, speech ends (between the two, a chunk
	// continues what came before). 0 takes max(Threshold − 0.15, 0.01).
	NegThreshold float64
	// MinSpeechMS: shorter segments are dropped.
	MinSpeechMS int
	// MaxSpeechSeconds: longer segments are split, at the last silence
	// of over 98 ms if there is one. 0 is no limit.
	MaxSpeechSeconds float64
	// MinSilenceMS of silence end a segment.
	MinSilenceMS int
	// SpeechPadMS are added on each side of every segment (less where two
	// segments are closer than twice this: the gap is shared).
	SpeechPadMS int
}

// DefaultOptions are faster-whisper's defaults (VadOptions()).
func DefaultOptions() Options {
	return Options{Threshold: 0.5, MinSilenceMS: 2000, SpeechPadMS: 400}
}

// Limits on Options that Validate enforces.
const (
	MinThreshold        = 0.01
	MaxThreshold        = 0.99
	MaxDurationMS       = 60_000 // MinSpeechMS, MinSilenceMS
	MaxSpeechPadMS      = 10_000
	MinMaxSpeechSeconds = 1
	MaxMaxSpeechSeconds = 24 * 3600
)

// OptionError names the option that is out of range.
type OptionError struct {
	Name string // the form field: threshold, neg_threshold, ...
	Msg  string
}

func (e *OptionError) Error() string { return e.Name + " " + e.Msg }

// Validate checks every option against its limits.
func (o Options) Validate() error {
	bad := func(name string, v any, format string, args ...any) error {
		return &OptionError{Name: name, Msg: fmt.Sprintf("%v must be %s", v, fmt.Sprintf(format, args...))}
	}
	between := func(v, lo, hi float64) bool { return v >= lo && v <= hi && !math.IsNaN(v) }
	switch {
	case !between(o.Threshold, MinThreshold, MaxThreshold):
		return bad("threshold", o.Threshold, "between %v and %v", MinThreshold, MaxThreshold)
	case o.NegThreshold != 0 && !between(o.NegThreshold, MinThreshold, o.Threshold):
		return bad("neg_threshold", o.NegThreshold, "between %v and threshold (%v)", MinThreshold, o.Threshold)
	case o.MinSpeechMS < 0 || o.MinSpeechMS > MaxDurationMS:
		return bad("min_speech_duration_ms", o.MinSpeechMS, "between 0 and %d", MaxDurationMS)
	case o.MinSilenceMS < 0 || o.MinSilenceMS > MaxDurationMS:
		return bad("min_silence_duration_ms", o.MinSilenceMS, "between 0 and %d", MaxDurationMS)
	case o.SpeechPadMS < 0 || o.SpeechPadMS > MaxSpeechPadMS:
		return bad("speech_pad_ms", o.SpeechPadMS, "between 0 and %d", MaxSpeechPadMS)
	case o.MaxSpeechSeconds != 0 && !between(o.MaxSpeechSeconds, MinMaxSpeechSeconds, MaxMaxSpeechSeconds):
		return bad("max_speech_duration_s", o.MaxSpeechSeconds, "between %d and %d", MinMaxSpeechSeconds, MaxMaxSpeechSeconds)
	}
	return nil
}

// Segment is a stretch of speech, in samples at 16 kHz: [Start, End).
type Segment struct {
	Start, End int
}

// Speech returns the speech segments of audio of n samples whose chunks
// have the probabilities probs, by faster-whisper's get_speech_timestamps
// (silero-vad's rules): the same segments, sample for sample, for the
// same probabilities.
func Speech(probs []float32, n int, o Options) []Segment {
	const w = ChunkSamples
	sr := float64(SampleRate)
	minSpeech := sr * float64(o.MinSpeechMS) / 1000
	pad := sr * float64(o.SpeechPadMS) / 1000
	maxSpeech := math.Inf(1)
	if o.MaxSpeechSeconds > 0 {
		maxSpeech = sr*o.MaxSpeechSeconds - w - 2*pad
	}
	minSilence := sr * float64(o.MinSilenceMS) / 1000
	const minSilenceAtMax = SampleRate * 98 / 1000
	thr, neg := o.Threshold, o.NegThreshold
	if neg == 0 {
		neg = max(thr-0.15, 0.01)
	}

	var (
		out                []Segment
		triggered, open    bool // in speech; cur has a start
		cur                Segment
		tempEnd            int
		prevEnd, nextStart int
	)
	reset := func() { prevEnd, nextStart, tempEnd = 0, 0, 0 }
	for i, p32 := range probs {
		p := float64(p32)
		at := w * i
		if p >= thr && tempEnd != 0 {
			tempEnd = 0
			if nextStart < prevEnd {
				nextStart = at
			}
		}
		if p >= thr && !triggered {
			triggered, open = true, true
			cur = Segment{Start: at}
			continue
		}
		if triggered && float64(at-cur.Start) > maxSpeech {
			if prevEnd != 0 {
				cur.End = prevEnd
				out = append(out, cur)
				open = false
				if nextStart < prevEnd {
					triggered = false
				} else {
					cur, open = Segment{Start: nextStart}, true
				}
				reset()
			} else {
				cur.End = at
				out = append(out, cur)
				open = false
				reset()
				triggered = false
				continue
			}
		}
		if p < neg && triggered {
			if tempEnd == 0 {
				tempEnd = at
			}
			if at-tempEnd > minSilenceAtMax {
				prevEnd = tempEnd
			}
			if float64(at-tempEnd) < minSilence {
				continue
			}
			cur.End = tempEnd
			if float64(cur.End-cur.Start) > minSpeech {
				out = append(out, cur)
			}
			open = false
			reset()
			triggered = false
			continue
		}
	}
	if open && float64(n-cur.Start) > minSpeech {
		cur.End = n
		out = append(out, cur)
	}

	p := int(pad)
	for i := range out {
		s := &out[i]
		if i == 0 {
			s.Start = max(0, s.Start-p)
		}
		if i == len(out)-1 {
			s.End = min(n, s.End+p)
			continue
		}
		next := &out[i+1]
		gap := next.Start - s.End
		if float64(gap) < 2*pad {
			s.End += half(gap)
			next.Start = max(0, next.Start-half(gap))
		} else {
			s.End = min(n, s.End+p)
			next.Start = max(0, next.Start-p)
		}
	}
	return out
}

// Detect returns the speech segments of x (16 kHz mono) as
// faster-whisper's get_speech_timestamps does: the probabilities of x
// padded with zeros to whole chunks (a whole chunk more when it is whole
// already, as faster-whisper pads), then Speech.
func (m *Model) Detect(ctx context.Context, x []float32, o Options) ([]Segment, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	padded := make([]float32, len(x)+ChunkSamples-len(x)%ChunkSamples)
	copy(padded, x)
	probs, err := m.Probs(ctx, padded)
	if err != nil {
		return nil, err
	}
	return Speech(probs, len(x), o), nil
}

// half is ⌊d/2⌋ (Python's d // 2).
func half(d int) int {
	if d < 0 {
		return -((1 - d) / 2)
	}
	return d / 2
}
