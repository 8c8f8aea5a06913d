package whisper

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"fusion/engine/audio/logmel"
)

// Clip is a stretch of the samples given to TranscribeClips, [Start,
// End) in samples at 16 kHz.
type Clip struct {
	Start, End int
}

// ErrBatchedOption: an option the batched mode does not have (word
// timestamps, a token cap).
var ErrBatchedOption = errors.New("not available in batched transcription")

// TranscribeClips transcribes each clip of samples on its own, as
// faster-whisper's BatchedInferencePipeline does with one chunk per
// batch: the clip's own features (its log-mel normalized on itself),
// one 30-s window (a longer clip is cut there), one decode at the first
// temperature without fallback, without previous-text conditioning and,
// with o.WithoutTimestamps (the pipeline's default), one segment from
// the clip's start to its end; every segment is kept, empty or not.
// Segment times are on samples' timeline; a segment's Seek is its clip's
// first frame there.
//
// The language, when a multilingual model is to detect it, is detected
// on the first 30 s of samples as a whole (the reference detects it on
// its chunks' features put end to end: the same but at the seams).
// Word timestamps and o.MaxTokens are ErrBatchedOption.
func (m *Model) TranscribeClips(ctx context.Context, samples []float32, clips []Clip, o Options) (*Result, error) {
	lang, err := m.language(o)
	if err != nil {
		return nil, err
	}
	if o.WordTimestamps || o.MaxTokens > 0 {
		return nil, fmt.Errorf("whisper: word timestamps and max_tokens are %w", ErrBatchedOption)
	}
	temp := 0.0
	if len(o.Temperatures) > 0 {
		temp = o.Temperatures[0]
	}
	ext, err := logmel.New(m.Dims.Mels)
	if err != nil {
		return nil, err
	}
	features := func(x []float32) (logmel.Features, error) {
		padded := make([]float32, len(x)+logmel.HopLength)
		copy(padded, x)
		return ext.Features(ctx, padded)
	}
	res := &Result{Language: lang, LanguageProbability: 1, Duration: float64(len(samples)) / logmel.SampleRate}
	if lang == "" && len(clips) > 0 {
		feats, err := features(samples)
		if err != nil {
			return nil, err
		}
		if res.Language, res.LanguageProbability, err = m.detect(ctx, feats); err != nil {
			return nil, err
		}
	}
	prompt := m.prompt(nil, m.sotSequence(res.Language, o.Translate), o)
	rng := rand.New(rand.NewPCG(o.Seed, 0x5eed))
	window := 2 * m.Dims.AudioCtx
	for _, c := range clips {
		if c.Start < 0 || c.End < c.Start || c.End > len(samples) {
			return nil, fmt.Errorf("whisper: clip [%d, %d) is outside the %d samples", c.Start, c.End, len(samples))
		}
		feats, err := features(samples[c.Start:c.End])
		if err != nil {
			return nil, err
		}
		size := min(window, feats.Frames-1)
		w, err := m.Encode(ctx, m.windowMel(feats, 0, size))
		if err != nil {
			return nil, err
		}
		g, err := m.generate(ctx, w, prompt, genOptions{temperature: temp, bestOf: 1, suppressBlank: o.SuppressBlank,
			maxInitialTS: int(math.Round(o.MaxInitialTimestamp / timePrecision)), maxLength: m.Dims.TextCtx,
			withTimestamps: !o.WithoutTimestamps}, rng)
		w.Close()
		if err != nil {
			return nil, err
		}
		offset := float64(c.Start) / logmel.SampleRate
		duration := float64(c.End-c.Start) / logmel.SampleRate
		avg := g.sumLogprob / float64(len(g.tokens)+1)
		seek := int(offset * framesPerSecond)
		segs, _ := m.split(g.tokens, offset, int(math.Ceil(duration))*framesPerSecond, duration, 0)
		for _, s := range segs {
			text := m.Text(s.tokens)
			seg := Segment{ID: len(res.Segments) + 1, Seek: seek, Start: round3(s.start), End: round3(s.end), Text: text,
				Tokens: s.tokens, Temperature: temp, AvgLogprob: avg, CompressionRatio: compressionRatio(text), NoSpeechProb: g.noSpeechProb}
			res.Segments = append(res.Segments, seg)
			if o.OnSegment != nil {
				o.OnSegment(seg)
			}
		}
	}
	res.Text = joinText(res.Segments)
	return res, nil
}

// round3 is Python's round(x, 3) (the pipeline's segment times).
func round3(x float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', 3, 64), 64)
	return v
}

// joinText is a transcript's text: its segments' texts joined, trimmed.
func joinText(segs []Segment) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteString(s.Text)
	}
	return strings.TrimSpace(b.String())
}

// windowMel is a 30-s window of features: size frames from start, zeros
// after them (faster-whisper's pad_or_trim).
func (m *Model) windowMel(feats logmel.Features, start, size int) []float32 {
	window := 2 * m.Dims.AudioCtx
	mel := make([]float32, m.Dims.Mels*window)
	for c := range m.Dims.Mels {
		copy(mel[c*window:c*window+size], feats.Data[c*feats.Frames+start:c*feats.Frames+start+size])
	}
	return mel
}
