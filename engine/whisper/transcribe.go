package whisper

import (
	"bytes"
	"compress/zlib"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"fusion/engine/audio/logmel"
)

// Options are a transcription's settings; DefaultOptions are
// faster-whisper's defaults with greedy decoding (beam_size=1).
type Options struct {
	// Language is the spoken language's code. An English-only model
	// (tiny.en and the other *.en) always decodes English: "" and "en"
	// are accepted, any other code is ErrLanguage. A multilingual model
	// takes one of its language tokens' codes, or "" to detect the
	// language on the first 30-s window, as faster-whisper does.
	Language string
	// Translate asks for an English translation (Whisper's translate
	// task); an English-only model cannot (ErrTranslate).
	Translate bool
	// Temperatures are tried in order until a decode passes the
	// thresholds (temperature fallback); 0 is greedy.
	Temperatures []float64
	// BestOf samples are drawn at a temperature above 0.
	BestOf int
	// CompressionRatioThreshold: a decode whose text's zlib compression
	// ratio is above it is too repetitive (0: no check).
	CompressionRatioThreshold float64
	// LogProbThreshold: a decode whose average log probability is below
	// it is too unlikely (−Inf: no check).
	LogProbThreshold float64
	// NoSpeechThreshold: a window whose <|nospeech|> probability is above
	// it and whose decode is below LogProbThreshold is silence, skipped
	// (above 1: no check).
	NoSpeechThreshold float64
	// ConditionOnPreviousText puts the text decoded so far (up to 223
	// tokens) in the prompt of the next window, unless the last window
	// needed a temperature above PromptResetOnTemperature.
	ConditionOnPreviousText  bool
	PromptResetOnTemperature float64
	// WithoutTimestamps decodes text only: one segment per window.
	WithoutTimestamps bool
	// MaxInitialTimestamp bounds the first timestamp, in seconds.
	MaxInitialTimestamp float64
	SuppressBlank       bool
	// WordTimestamps times every word by cross-attention alignment
	// (faster-whisper's word_timestamps): Segment.Words, the segments'
	// bounds moved to their words', and seek to the last word's end.
	WordTimestamps bool
	// PrependPunctuations and AppendPunctuations are merged into the
	// next and the previous word.
	PrependPunctuations, AppendPunctuations string
	// MaxTokens caps the tokens decoded over the whole transcription,
	// timestamps included (0: no cap but the model's, half its text
	// context per window). A window's decode stops at what is left of it
	// and is cut into segments as any other (an unfinished last segment
	// is dropped); the transcription ends when none is left.
	MaxTokens int
	// Seed makes sampling at temperatures above 0 reproducible.
	Seed uint64
	// OnSegment, if set, is called with each segment as it is decoded.
	OnSegment func(Segment)
}

// DefaultOptions are faster-whisper's transcribe defaults, greedy.
func DefaultOptions() Options {
	return Options{
		Temperatures:              []float64{0, 0.2, 0.4, 0.6, 0.8, 1},
		BestOf:                    5,
		CompressionRatioThreshold: 2.4,
		LogProbThreshold:          -1,
		NoSpeechThreshold:         0.6,
		ConditionOnPreviousText:   true,
		PromptResetOnTemperature:  0.5,
		MaxInitialTimestamp:       1,
		SuppressBlank:             true,
		PrependPunctuations:       DefaultPrependPunctuations,
		AppendPunctuations:        DefaultAppendPunctuations,
	}
}

// Errors a caller may branch on (a request's mistake, not the model's).
var (
	ErrLanguage  = errors.New("language not supported by the model")
	ErrTranslate = errors.New("the model cannot translate")
	// ErrWordTimestamps: word timestamps were asked of a model without
	// alignment heads.
	ErrWordTimestamps = errors.New("the model cannot time words")
)

// Segment is one timed piece of a transcript, with faster-whisper's
// fields.
type Segment struct {
	ID               int
	Seek             int // the window's first frame
	Start, End       float64
	Text             string
	Tokens           []int
	Temperature      float64
	AvgLogprob       float64
	CompressionRatio float64
	NoSpeechProb     float64
	Words            []Word // with Options.WordTimestamps
}

// Result is a transcription.
type Result struct {
	Text     string // the segments' texts joined, trimmed
	Language string
	// LanguageProbability is the detected language's probability (1 when
	// the language was given or the model is English-only).
	LanguageProbability float64
	Duration            float64 // of the audio, in seconds
	Segments            []Segment
}

// Whisper's fixed time grid.
const (
	timePrecision = 0.02                                          // seconds per timestamp token
	inputStride   = 2                                             // mel frames per encoder position
	timePerFrame  = float64(logmel.HopLength) / logmel.SampleRate // 0.01, computed as the reference does
)

// Transcribe transcribes 16 kHz mono samples as faster-whisper's
// transcribe does (without VAD or word timestamps): the features of the
// whole signal, then windows of 30 s from seek, each decoded with
// temperature fallback and cut into segments at its timestamp tokens,
// seek advancing to the last complete segment's end.
func (m *Model) Transcribe(ctx context.Context, samples []float32, o Options) (*Result, error) {
	lang, err := m.language(o)
	if err != nil {
		return nil, err
	}
	if o.WordTimestamps && len(m.Config.AlignmentHeads) == 0 {
		return nil, fmt.Errorf("whisper: the model's config.json lists no alignment_heads: %w", ErrWordTimestamps)
	}
	if len(o.Temperatures) == 0 {
		o.Temperatures = []float64{0}
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = 0
	}
	ext, err := logmel.New(m.Dims.Mels)
	if err != nil {
		return nil, err
	}
	// faster-whisper pads the signal with one hop of zeros before the
	// features; the last frame is then not content.
	padded := make([]float32, len(samples)+logmel.HopLength)
	copy(padded, samples)
	feats, err := ext.Features(ctx, padded)
	if err != nil {
		return nil, err
	}
	res := &Result{Language: lang, LanguageProbability: 1, Duration: float64(len(samples)) / logmel.SampleRate}
	window := 2 * m.Dims.AudioCtx
	if lang == "" {
		if res.Language, res.LanguageProbability, err = m.detect(ctx, feats); err != nil {
			return nil, err
		}
	}
	sot := m.sotSequence(res.Language, o.Translate)
	content := feats.Frames - 1
	rng := rand.New(rand.NewPCG(o.Seed, 0x5eed))
	var all []int
	resetSince := 0
	lastSpeech := 0.0
	decoded := 0 // tokens, against o.MaxTokens
	for seek := 0; seek < content; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if o.MaxTokens > 0 && decoded >= o.MaxTokens {
			break
		}
		timeOffset := float64(seek) * timePerFrame
		size := min(window, content-seek)
		w, err := m.Encode(ctx, m.windowMel(feats, seek, size))
		if err != nil {
			return nil, err
		}
		prompt := m.prompt(all[resetSince:], sot, o)
		g, avg, temp, ratio, err := m.fallback(ctx, w, prompt, o, o.MaxTokens-decoded, rng)
		if err != nil {
			w.Close()
			return nil, err
		}
		decoded += len(g.tokens)
		if g.noSpeechProb > o.NoSpeechThreshold && !(avg > o.LogProbThreshold) {
			w.Close()
			seek += size
			continue
		}
		prevSeek := seek
		var segs []rawSegment
		segs, seek = m.split(g.tokens, timeOffset, size, float64(size)*timePerFrame, seek)
		if o.WordTimestamps {
			if err := m.addWordTimestamps(ctx, w, sot, segs, prevSeek, size, o, res.Language, lastSpeech); err != nil {
				w.Close()
				return nil, err
			}
			if !singleTimestampEnding(g.tokens, m.Tokens.TimestampBegin) {
				if end, ok := lastEnd(segs); ok && end > timeOffset {
					seek = int(math.RoundToEven(end * framesPerSecond))
				}
			}
			if end, ok := lastEnd(segs); ok {
				lastSpeech = end
			}
		}
		w.Close()
		for _, s := range segs {
			text := m.Text(s.tokens)
			if s.start == s.end || strings.TrimSpace(text) == "" {
				continue
			}
			all = append(all, s.tokens...)
			seg := Segment{ID: len(res.Segments) + 1, Seek: prevSeek, Start: s.start, End: s.end, Text: text, Tokens: s.tokens,
				Temperature: temp, AvgLogprob: avg, CompressionRatio: ratio, NoSpeechProb: g.noSpeechProb, Words: s.words}
			res.Segments = append(res.Segments, seg)
			if o.OnSegment != nil {
				o.OnSegment(seg)
			}
		}
		if !o.ConditionOnPreviousText || temp > o.PromptResetOnTemperature {
			resetSince = len(all)
		}
	}
	res.Text = joinText(res.Segments)
	return res, nil
}

// language checks the options' language and task against the model and
// returns the language to decode, "" when a multilingual model is to
// detect it.
func (m *Model) language(o Options) (string, error) {
	if m.Tokens.Multilingual {
		if o.Language == "" {
			return "", nil
		}
		for _, l := range m.Tokens.Languages {
			if strings.EqualFold(l.Code, o.Language) {
				return l.Code, nil
			}
		}
		return "", fmt.Errorf("whisper: language %q is not one of the model's %d: %w", o.Language, len(m.Tokens.Languages), ErrLanguage)
	}
	if o.Translate {
		return "", fmt.Errorf("whisper: English-only model: %w", ErrTranslate)
	}
	if o.Language != "" && !strings.EqualFold(o.Language, "en") {
		return "", fmt.Errorf("whisper: English-only model, language %q: %w", o.Language, ErrLanguage)
	}
	return "en", nil
}

// detect is faster-whisper's detect_language with one segment: the
// first 30 s of the features (the padding frame included, zeros after),
// encoded, then one decoder step on <|startoftranscript|> whose logits,
// restricted to the language tokens, are softmaxed (ctranslate2's
// Whisper.detect_language); the likeliest language and its probability.
func (m *Model) detect(ctx context.Context, feats logmel.Features) (string, float64, error) {
	probs, err := m.languageProbs(ctx, feats)
	if err != nil {
		return "", 0, err
	}
	best := 0
	for i, p := range probs {
		if p > probs[best] {
			best = i
		}
	}
	return m.Tokens.Languages[best].Code, probs[best], nil
}

// languageProbs are the probabilities of the model's languages, in the
// order of Tokens.Languages, on the first window of feats.
func (m *Model) languageProbs(ctx context.Context, feats logmel.Features) ([]float64, error) {
	window := 2 * m.Dims.AudioCtx
	size := min(window, feats.Frames)
	w, err := m.Encode(ctx, m.windowMel(feats, 0, size))
	if err != nil {
		return nil, err
	}
	defer w.Close()
	logits, err := w.Decode(ctx, []int{m.Tokens.SOT}, []int{0})
	if err != nil {
		return nil, err
	}
	langs := make([]float32, len(m.Tokens.Languages))
	for i, l := range m.Tokens.Languages {
		langs[i] = logits[l.ID]
	}
	lse := logSumExp(langs)
	probs := make([]float64, len(langs))
	for i, v := range langs {
		probs[i] = math.Exp(float64(v) - lse)
	}
	return probs, nil
}

// sotSequence is the start of every window's prompt: for an English-only
// model <|startoftranscript|> alone, for a multilingual one followed by
// the language's token and the task's (<|transcribe|> or <|translate|>),
// as faster-whisper's Tokenizer.sot_sequence.
func (m *Model) sotSequence(lang string, translate bool) []int {
	seq := []int{m.Tokens.SOT}
	if !m.Tokens.Multilingual {
		return seq
	}
	if id, ok := m.languageToken(lang); ok {
		seq = append(seq, id)
	}
	if translate {
		return append(seq, m.Tokens.Translate)
	}
	return append(seq, m.Tokens.Transcribe)
}

// prompt is faster-whisper's get_prompt: <|startofprev|> and the last
// previous tokens, then the start-of-transcript sequence sot.
func (m *Model) prompt(previous, sot []int, o Options) []int {
	var p []int
	if len(previous) > 0 {
		p = append(p, m.Tokens.SOTPrev)
		keep := m.Dims.TextCtx/2 - 1
		p = append(p, previous[max(0, len(previous)-keep):]...)
	}
	p = append(p, sot...)
	if o.WithoutTimestamps {
		p = append(p, m.Tokens.NoTimestamps)
	}
	return p
}

// fallback decodes at each temperature in turn until the decode is
// neither too repetitive nor too unlikely (or is silence), as
// generate_with_fallback does; if none passes, the likeliest of those
// under the compression threshold (or of all) is kept, with the last
// temperature. Each decode makes at most maxNew tokens when o.MaxTokens
// is set.
func (m *Model) fallback(ctx context.Context, w *Window, prompt []int, o Options, maxNew int, rng *rand.Rand) (generation, float64, float64, float64, error) {
	type decoded struct {
		g               generation
		avg, temp, comp float64
	}
	var all, below []decoded
	for _, temp := range o.Temperatures {
		g, err := m.generate(ctx, w, prompt, genOptions{temperature: temp, bestOf: o.BestOf, suppressBlank: o.SuppressBlank,
			maxInitialTS: int(math.Round(o.MaxInitialTimestamp / timePrecision)), maxLength: m.Dims.TextCtx,
			maxNew: maxNew, withTimestamps: !o.WithoutTimestamps}, rng)
		if err != nil {
			return g, 0, 0, 0, err
		}
		d := decoded{g: g, avg: g.sumLogprob / float64(len(g.tokens)+1), temp: temp,
			comp: compressionRatio(strings.TrimSpace(m.Text(g.tokens)))}
		all = append(all, d)
		needs := false
		if o.CompressionRatioThreshold > 0 {
			if d.comp > o.CompressionRatioThreshold {
				needs = true
			} else {
				below = append(below, d)
			}
		}
		if d.avg < o.LogProbThreshold {
			needs = true
		}
		if g.noSpeechProb > o.NoSpeechThreshold && d.avg < o.LogProbThreshold {
			needs = false
		}
		if !needs {
			return d.g, d.avg, d.temp, d.comp, nil
		}
	}
	pool := below
	if len(pool) == 0 {
		pool = all
	}
	best := pool[0]
	for _, d := range pool[1:] {
		if d.avg > best.avg {
			best = d
		}
	}
	return best.g, best.avg, o.Temperatures[len(o.Temperatures)-1], best.comp, nil
}

// compressionRatio is len(text) / len(zlib(text)), zlib at level 6 as
// Python's zlib.compress. (Go's deflate is not zlib's: the compressed
// lengths can differ by a few bytes, which matters only at the
// threshold.)
func compressionRatio(text string) float64 {
	var b bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&b, 6)
	zw.Write([]byte(text))
	zw.Close()
	return float64(len(text)) / float64(b.Len())
}

type rawSegment struct {
	start, end float64
	tokens     []int
	words      []Word
}

// singleTimestampEnding: the window's tokens end on a lone timestamp
// (no speech after it).
func singleTimestampEnding(tokens []int, tb int) bool {
	n := len(tokens)
	return n >= 2 && tokens[n-2] < tb && tokens[n-1] >= tb
}

// split cuts a window's tokens at consecutive timestamp pairs, as
// faster-whisper's _split_segments_by_timestamps does, and returns the
// segments and the next seek: past the window when it ended on a single
// timestamp (no speech after it) or had no pair, else at the last
// complete segment's end timestamp.
func (m *Model) split(tokens []int, timeOffset float64, size int, duration float64, seek int) ([]rawSegment, int) {
	tb := m.Tokens.TimestampBegin
	n := len(tokens)
	single := singleTimestampEnding(tokens, tb)
	var cuts []int
	for i := 1; i < n; i++ {
		if tokens[i] >= tb && tokens[i-1] >= tb {
			cuts = append(cuts, i)
		}
	}
	if len(cuts) == 0 {
		end := duration
		var lastTS = -1
		for _, t := range tokens {
			if t >= tb {
				lastTS = t
			}
		}
		if lastTS >= 0 && lastTS != tb {
			end = float64(lastTS-tb) * timePrecision
		}
		return []rawSegment{{start: timeOffset, end: timeOffset + end, tokens: tokens}}, seek + size
	}
	if single {
		cuts = append(cuts, n)
	}
	var segs []rawSegment
	last := 0
	for _, c := range cuts {
		part := tokens[last:c]
		segs = append(segs, rawSegment{
			start:  timeOffset + float64(part[0]-tb)*timePrecision,
			end:    timeOffset + float64(part[len(part)-1]-tb)*timePrecision,
			tokens: part,
		})
		last = c
	}
	if single {
		return segs, seek + size
	}
	return segs, seek + (tokens[last-1]-tb)*inputStride
}
