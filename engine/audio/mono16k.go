package audio

import (
	"context"
	"fmt"

	"fusion/engine/audio/resample"
)

// SpeechRate is the sample rate speech models (Whisper, VAD) take.
const SpeechRate = 16000

// Mono16k downmixes s (channel mean) and resamples it to 16 kHz with
// resample.DefaultSpec.
func Mono16k(ctx context.Context, s Signal) ([]float32, error) {
	m := Mono(s)
	r, err := resample.New(m.Rate, SpeechRate, resample.Spec{})
	if err != nil {
		return nil, fmt.Errorf("audio: %w", err)
	}
	return r.Resample(ctx, m.Samples)
}
