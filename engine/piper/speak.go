package piper

import (
	"context"
	"fmt"
	"math"
)

// Sentence is the speech of one sentence of the text: samples in [−1, 1]
// at the voice's rate, peak-normalized as piper-tts does by default.
type Sentence struct {
	Phonemes []string
	Samples  []float32
}

// Speak phonemizes text with e, splits it into sentences as espeak-ng
// does, and synthesizes each (piper-tts's PiperVoice.synthesize with
// normalize_audio on and volume 1): a sentence is scaled so that its peak
// is 1. yield receives each sentence as soon as it is synthesized and may
// stop the rest by returning an error. Phonemes missing from the voice's
// map are skipped, as piper-tts does.
func (v *Voice) Speak(ctx context.Context, e Espeak, text string, sc Scales, normal func() float32, yield func(Sentence) error) error {
	sents, err := e.Phonemize(ctx, v.Config.Espeak.Voice, text)
	if err != nil {
		return err
	}
	for _, ph := range sents {
		if err := ctx.Err(); err != nil {
			return err
		}
		ids, _ := v.Config.IDs(ph)
		if len(ids) > MaxPhonemeIDs {
			return fmt.Errorf("piper: a sentence of %d phoneme ids is over the %d limit", len(ids), MaxPhonemeIDs)
		}
		x, err := v.Synthesize(ctx, ids, sc, normal)
		if err != nil {
			return err
		}
		normalizePeak(x)
		if err := yield(Sentence{Phonemes: ph, Samples: x}); err != nil {
			return err
		}
	}
	return nil
}

// normalizePeak scales x so that max |x| is 1 (silence stays zero), then
// clips to [−1, 1].
func normalizePeak(x []float32) {
	var peak float32
	for _, v := range x {
		peak = max(peak, float32(math.Abs(float64(v))))
	}
	for i, v := range x {
		if peak < 1e-8 {
			x[i] = 0
			continue
		}
		x[i] = min(max(v/peak, -1), 1)
	}
}

// PCM16 converts samples in [−1, 1] to 16-bit PCM as piper-tts does:
// clip(x·32767, ±32767), truncated toward zero.
func PCM16(x []float32) []int16 {
	out := make([]int16, len(x))
	for i, v := range x {
		out[i] = int16(min(max(v*32767, -32767), 32767))
	}
	return out
}
