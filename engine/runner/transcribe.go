package runner

import (
	"context"
	"errors"
	"math"
	"slices"

	"fusion/engine"
	"fusion/engine/audio"
	"fusion/engine/silero"
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
	if req.Batched && !req.VADFilter {
		return nil, invalid("a batched transcription needs the speech segments of a VAD")
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
	res, err := transcribe(ctx, em.asr, samples, req, o)
	em.asrMu.Unlock()
	if err != nil {
		if errors.Is(err, whisper.ErrLanguage) || errors.Is(err, whisper.ErrTranslate) || errors.Is(err, whisper.ErrWordTimestamps) ||
			errors.Is(err, whisper.ErrBatchedOption) {
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

// transcribe runs the model on samples as req asks: the whole signal, or
// with VADFilter its speech put end to end — as one stream, or Batched
// in independent pieces (those of req.Pieces) — with the segments' times
// taken back to the original timeline as faster-whisper's
// restore_speech_timestamps does. Duration stays the original's.
func transcribe(ctx context.Context, m *whisper.Model, samples []float32, req *engine.TranscribeRequest, o whisper.Options) (*whisper.Result, error) {
	if !req.VADFilter {
		return m.Transcribe(ctx, samples, o)
	}
	speech := make([]silero.Segment, len(req.Speech))
	for i, s := range req.Speech {
		speech[i] = silero.Segment{Start: s.Start, End: s.End}
	}
	if err := silero.CheckSegments(speech, len(samples)); err != nil {
		return nil, invalid("%v", err)
	}
	stream := silero.Concat(samples, speech)
	tm := silero.NewTimeMap(speech)
	if on := o.OnSegment; on != nil {
		// The words are the result's too: restored on a copy.
		o.OnSegment = func(s whisper.Segment) { s.Words = slices.Clone(s.Words); restoreTimes(tm, &s); on(s) }
	}
	var res *whisper.Result
	var err error
	if req.Batched {
		pieces := engine.TranscribePieces(req.Speech)
		from, to := 0, len(pieces)
		if req.Pieces != [2]int{} {
			from, to = req.Pieces[0], req.Pieces[1]
			if from < 0 || to > len(pieces) || from >= to {
				return nil, invalid("pieces [%d, %d) are not within the %d of the speech", from, to, len(pieces))
			}
		}
		var clips []whisper.Clip
		for _, p := range pieces[from:to] {
			if p.Len > 0 {
				clips = append(clips, whisper.Clip{Start: p.Offset, End: p.Offset + p.Len})
			}
		}
		o.WithoutTimestamps = true
		res, err = m.TranscribeClips(ctx, stream, clips, o)
	} else {
		res, err = m.Transcribe(ctx, stream, o)
	}
	if err != nil {
		return nil, err
	}
	res.Duration = float64(len(samples)) / silero.SampleRate
	for i := range res.Segments {
		restoreTimes(tm, &res.Segments[i])
	}
	return res, nil
}

// restoreTimes takes a segment's times (and its words') from the
// speech-only timeline back to the original one: a word by the speech
// segment its middle falls in, the segment then spanning its words; a
// segment without words by its start and its end.
func restoreTimes(tm *silero.TimeMap, s *whisper.Segment) {
	if len(s.Words) > 0 {
		for i := range s.Words {
			w := &s.Words[i]
			c := tm.Chunk((w.Start+w.End)/2, false)
			w.Start, w.End = tm.Original(w.Start, c), tm.Original(w.End, c)
		}
		s.Start, s.End = s.Words[0].Start, s.Words[len(s.Words)-1].End
		return
	}
	s.Start = tm.Original(s.Start, tm.Chunk(s.Start, false))
	s.End = tm.Original(s.End, tm.Chunk(s.End, true))
}
