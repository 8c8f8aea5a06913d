package runner

import (
	"context"
	"errors"
	"time"

	"fusion/engine"
	"fusion/engine/audio"
	"fusion/engine/silero"
)

// DetectSpeech decodes the request's audio as Transcribe does, brings it
// to 16 kHz mono and finds its speech segments on a Silero VAD model of
// the pool (loading it, evicting others, as Generate does). One detection
// runs at a time per model.
func (r *Runner) DetectSpeech(ctx context.Context, req *engine.VADRequest) (*engine.VADResult, error) {
	if len(req.Audio) == 0 {
		return nil, invalid("file is empty")
	}
	o := silero.Options{Threshold: req.Threshold, NegThreshold: req.NegThreshold, MinSpeechMS: req.MinSpeechMS,
		MinSilenceMS: req.MinSilenceMS, SpeechPadMS: req.SpeechPadMS, MaxSpeechSeconds: req.MaxSpeechSeconds}
	if err := o.Validate(); err != nil {
		return nil, invalid("%v", err)
	}
	em, done, err := r.enterEncoder(ctx, req.Model)
	if err != nil {
		return nil, err
	}
	defer done()
	if em == nil || em.vad == nil {
		return nil, invalid("model %q is a%s %s model; it does not detect speech", req.Model, article(kindOf(em)), kindOf(em))
	}
	samples, err := speechSamples(ctx, req.Audio, req.MaxBytes, req.MaxSeconds)
	if err != nil {
		return nil, err
	}
	em.vadMu.Lock()
	segs, err := em.vad.Detect(ctx, samples, o)
	em.vadMu.Unlock()
	if err != nil {
		var oe *silero.OptionError
		if errors.As(err, &oe) {
			return nil, invalid("%v", err)
		}
		return nil, err
	}
	res := &engine.VADResult{Duration: float64(len(samples)) / silero.SampleRate, Segments: make([]engine.VADSegment, len(segs))}
	for i, s := range segs {
		res.Segments[i] = engine.VADSegment{Start: float64(s.Start) / silero.SampleRate, End: float64(s.End) / silero.SampleRate}
	}
	return res, nil
}

// speechSamples decodes an uploaded file (package audio: WAV, FLAC, MP3,
// Vorbis in Go, the rest through ffmpeg) under the caps (0: the
// defaults) and brings it to 16 kHz mono; audio that is not audio,
// truncated or too long is an invalid request.
func speechSamples(ctx context.Context, data []byte, maxBytes int64, maxSeconds float64) ([]float32, error) {
	opts := audio.Options{MaxBytes: maxBytes, MaxDuration: time.Duration(maxSeconds * float64(time.Second))}
	sig, err := audio.DecodeBytes(ctx, data, opts)
	if err != nil {
		return nil, audioError(err)
	}
	samples, err := audio.Mono16k(ctx, sig)
	if err != nil {
		return nil, audioError(err)
	}
	return samples, nil
}
