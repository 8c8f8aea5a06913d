package engine

import "context"

// KindDenoise: speech enhancement (/v1/audio/process, task denoise).
const KindDenoise = "denoise"

// DenoiseRequest is the dialect-neutral denoising request. The audio
// travels as uploaded, as a VADRequest's does.
type DenoiseRequest struct {
	Model string
	Audio []byte
	// MaxBytes and MaxSeconds cap the upload and its duration (0: the
	// engine's defaults, as for transcriptions).
	MaxBytes   int64
	MaxSeconds float64
}

// DenoiseResult is the denoised audio: mono, at the upload's sample rate.
type DenoiseResult struct {
	Rate    int
	Samples []float32 // in [−1, 1]
}

// SpeechDenoiser removes noise from speech. Errors: ErrModelNotFound,
// ErrUnavailable, ErrOverloaded, and *prompt.InvalidRequestError for bad
// input (not audio, a model that is not a denoiser).
type SpeechDenoiser interface {
	Denoise(ctx context.Context, req *DenoiseRequest) (*DenoiseResult, error)
}
