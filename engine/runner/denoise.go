package runner

import (
	"context"
	"time"

	"fusion/engine"
	"fusion/engine/audio"
	"fusion/engine/audio/resample"
	"fusion/engine/rnnoise"
)

// Denoise decodes the request's audio as Transcribe does (under the same
// caps), downmixes it, brings it to RNNoise's 48 kHz, removes the noise
// on an RNNoise model of the pool (loading it, evicting others, as
// Generate does) and brings the result back to the upload's rate. One
// denoising runs at a time per model.
func (r *Runner) Denoise(ctx context.Context, req *engine.DenoiseRequest) (*engine.DenoiseResult, error) {
	if len(req.Audio) == 0 {
		return nil, invalid("file is empty")
	}
	em, done, err := r.enterEncoder(ctx, req.Model)
	if err != nil {
		return nil, err
	}
	defer done()
	if em == nil || em.dn == nil {
		return nil, invalid("model %q is a%s %s model; it does not denoise", req.Model, article(kindOf(em)), kindOf(em))
	}
	opts := audio.Options{MaxBytes: req.MaxBytes, MaxDuration: time.Duration(req.MaxSeconds * float64(time.Second))}
	sig, err := audio.DecodeBytes(ctx, req.Audio, opts)
	if err != nil {
		return nil, audioError(err)
	}
	m := audio.Mono(sig)
	x, err := convertRate(ctx, m.Samples, m.Rate, rnnoise.SampleRate)
	if err != nil {
		return nil, audioError(err)
	}
	em.dnMu.Lock()
	y, _, err := em.dn.Denoise(ctx, x)
	em.dnMu.Unlock()
	if err != nil {
		return nil, err
	}
	out, err := convertRate(ctx, y, rnnoise.SampleRate, m.Rate)
	if err != nil {
		return nil, err
	}
	return &engine.DenoiseResult{Rate: m.Rate, Samples: out}, nil
}

// convertRate resamples x from one rate to another (resample's default
// filter), or returns it as it is when they are equal.
func convertRate(ctx context.Context, x []float32, from, to int) ([]float32, error) {
	if from == to {
		return x, nil
	}
	rs, err := resample.New(from, to, resample.Spec{})
	if err != nil {
		return nil, err
	}
	return rs.Resample(ctx, x)
}
