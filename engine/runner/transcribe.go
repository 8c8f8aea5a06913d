package runner

import (
	"context"
	"errors"
	"math"

	"fusion/engine"
	"fusion/engine/audio"
	"fusion/engine/whisper"
)

// Transcribe decodes the request's audio (package audio: WAV, FLAC, MP3,
// Vorbis in Go, the rest through ffmpeg), brings it to 16 kHz mono and
// transcribes it on a speech model of the pool (loading it, evicting
// others, as Generate does). One transcription runs at a time per model.
func (r *Runner) Transcribe(ctx context.Context, req *engine.TranscribeRequest) (*engine.TranscribeResult, error) {
	if len(req.Audio) == 0 {
		return nil, invalid("file is empty")
	}
	if t := req.Temperature; t < 0 || t > 1 || math.IsNaN(t) {
		return nil, invalid("temperature must be between 0 and 1, got %v", t)
	}
	if req.MaxTokens < 0 {
		return nil, invalid("max_tokens must not be negative, got %d", req.MaxTokens)
	}
	em, done, err := r.enterEncoder(ctx, req.Model)
	if err != nil {
		return nil, err
	}
	defer done()
	if em == nil || em.asr == nil {
		return nil, invalid("model %q is a%s %s model; it does not transcribe speech", req.Model, article(kindOf(em)), kindOf(em))
	}
	samples, err := speechSamples(ctx, req.Audio, req.MaxBytes, req.MaxSeconds)
	if err != nil {
		return nil, err
	}
	o := whisper.DefaultOptions()
	o.Language, o.Translate, o.WordTimestamps, o.MaxTokens = req.Language, req.Translate, req.WordTimestamps, req.MaxTokens
	o.Temperatures = nil
	for t := req.Temperature; t <= 1+1e-9; t += 0.2 {
		o.Temperatures = append(o.Temperatures, math.Round(t*1e6)/1e6)
	}
	if req.OnSegment != nil {
		o.OnSegment = func(s whisper.Segment) { req.OnSegment(segment(s)) }
	}
	em.asrMu.Lock()
	res, err := em.asr.Transcribe(ctx, samples, o)
	em.asrMu.Unlock()
	if err != nil {
		if errors.Is(err, whisper.ErrLanguage) || errors.Is(err, whisper.ErrTranslate) || errors.Is(err, whisper.ErrWordTimestamps) {
			return nil, invalid("%v", err)
		}
		return nil, err
	}
	out := &engine.TranscribeResult{Text: res.Text, Language: res.Language, LanguageProbability: res.LanguageProbability, Duration: res.Duration,
		Segments: make([]engine.TranscribeSegment, len(res.Segments))}
	for i, s := range res.Segments {
		out.Segments[i] = segment(s)
	}
	return out, nil
}

// segment is the engine's copy of a whisper segment.
func segment(s whisper.Segment) engine.TranscribeSegment {
	out := engine.TranscribeSegment{ID: s.ID, Seek: s.Seek, Start: s.Start, End: s.End, Text: s.Text, Tokens: s.Tokens,
		Temperature: s.Temperature, AvgLogprob: s.AvgLogprob, CompressionRatio: s.CompressionRatio, NoSpeechProb: s.NoSpeechProb}
	for _, w := range s.Words {
		out.Words = append(out.Words, engine.TranscribeWord(w))
	}
	return out
}

// audioError makes a decoding failure of the input a bad request, naming
// the problem; a cancelled context stays what it is.
func audioError(err error) error {
	var ae *audio.Error
	if errors.As(err, &ae) {
		return invalid("%v", err)
	}
	return err
}
