package engine

import (
	"context"
	"math"
)

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

// SpeechRange is a stretch of speech in samples at 16 kHz: [Start, End).
type SpeechRange struct {
	Start, End int
}

// SpeechRanges are a VAD result's segments in samples at 16 kHz.
func SpeechRanges(segs []VADSegment) []SpeechRange {
	out := make([]SpeechRange, len(segs))
	for i, s := range segs {
		out[i] = SpeechRange{Start: int(math.Round(s.Start * 16000)), End: int(math.Round(s.End * 16000))}
	}
	return out
}

// SpeechPiece is a stretch of the speech-only signal (the speech ranges
// put end to end), in samples of that signal.
type SpeechPiece struct {
	Offset, Len int
}

// MaxPieceSamples is the speech a batched transcription's piece holds at
// most: Whisper's 30-s window.
const MaxPieceSamples = 30 * 16000

// TranscribePieces groups speech ranges, in order, into the pieces of a
// batched transcription: at most MaxPieceSamples of speech each, a range
// that would make a piece longer starting the next one, as
// faster-whisper's collect_chunks with max_duration does. No ranges give
// one empty piece, as there.
func TranscribePieces(speech []SpeechRange) []SpeechPiece {
	if len(speech) == 0 {
		return []SpeechPiece{{}}
	}
	var out []SpeechPiece
	cur, total := 0, 0
	for _, s := range speech {
		n := s.End - s.Start
		if cur+n > MaxPieceSamples {
			out = append(out, SpeechPiece{Offset: total, Len: cur})
			total += cur
			cur = n
			continue
		}
		cur += n
	}
	return append(out, SpeechPiece{Offset: total, Len: cur})
}

// SharePieces splits pieces into at most n contiguous runs of similar
// speech length, for n nodes at once: the run boundaries are where the
// speech so far comes closest to an even share (each run at least one
// piece). It returns each run's [first, end) piece indices.
func SharePieces(pieces []SpeechPiece, n int) [][2]int {
	k := min(n, len(pieces))
	if k <= 0 {
		return nil
	}
	sum := make([]int, len(pieces)+1)
	for i, p := range pieces {
		sum[i+1] = sum[i] + p.Len
	}
	total := sum[len(pieces)]
	out := make([][2]int, 0, k)
	first := 0
	for j := 1; j < k; j++ {
		target := float64(total) * float64(j) / float64(k)
		best := first + 1
		for b := first + 1; b <= len(pieces)-(k-j); b++ {
			if math.Abs(float64(sum[b])-target) < math.Abs(float64(sum[best])-target) {
				best = b
			}
		}
		out = append(out, [2]int{first, best})
		first = best
	}
	return append(out, [2]int{first, len(pieces)})
}
