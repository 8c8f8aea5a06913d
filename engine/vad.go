package engine

import "context"

// KindVAD: voice activity detection (/v1/audio/process, task vad).
const KindVAD = "vad"

// VADRequest is the dialect-neutral voice activity detection request. The
// audio travels as uploaded, as a TranscribeRequest's does. The options
// are faster-whisper's VadOptions; the front end fills the defaults.
type VADRequest struct {
	Model string
	Audio []byte
	// MaxBytes and MaxSeconds cap the upload and its duration (0: the
	// engine's defaults, as for transcriptions).
	MaxBytes   int64
	MaxSeconds float64
	// Threshold: a chunk at least this likely to be speech is speech;
	// below NegThreshold speech ends (0: max(Threshold − 0.15, 0.01)).
	Threshold, NegThreshold float64
	// MinSpeechMS: shorter segments are dropped; MinSilenceMS of silence
	// end a segment; SpeechPadMS are added on each side.
	MinSpeechMS, MinSilenceMS, SpeechPadMS int
	// MaxSpeechSeconds splits longer segments (0: no limit).
	MaxSpeechSeconds float64
}

// VADSegment is a stretch of speech, in seconds from the start.
type VADSegment struct {
	Start, End float64
}

// VADResult is the speech found in the audio.
type VADResult struct {
	Duration float64 // of the audio, in seconds
	Segments []VADSegment
}

// SpeechDetector finds speech in audio. Errors: ErrModelNotFound,
// ErrUnavailable, ErrOverloaded, and *prompt.InvalidRequestError for bad
// input (not audio, options out of range, a model that is not a VAD).
type SpeechDetector interface {
	DetectSpeech(ctx context.Context, req *VADRequest) (*VADResult, error)
}
