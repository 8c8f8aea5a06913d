package openai

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"fusion/engine"
)

// Default caps of an audio upload (Options.MaxAudioBytes and
// MaxAudioSeconds): OpenAI's 25 MB, and 30 minutes. The body limit of the
// router (--max-body-bytes, 10 MiB by default) applies first, with 413.
const (
	DefaultMaxAudioBytes   = 25 << 20
	DefaultMaxAudioSeconds = 30 * 60
)

// DefaultMaxTranscriptionTokens is the largest max_tokens a transcription
// or translation may ask for (Options.MaxTranscriptionTokens): the
// contract's example for long audio, 65536 (30 minutes of Whisper are at
// most 60 windows of 224 tokens).
const DefaultMaxTranscriptionTokens = 65536

// The response_format values of /v1/audio/transcriptions and
// /v1/audio/translations.
var audioFormats = []string{"json", "text", "srt", "verbose_json", "vtt"}

// audioRequest is a parsed multipart transcription or translation form.
type audioRequest struct {
	model, language, format string
	temperature             float64
	maxTokens               int // 0: none asked
	stream                  bool
	file                    []byte
	// words: word timestamps asked for, by the form field wordsParam.
	words      bool
	wordsParam string
	// vadFilter, batched and vadParams (the raw JSON object, "" when
	// absent): see parseVADParameters.
	vadFilter, batched bool
	vadParams          string
}

// parseAudioForm reads the multipart form: file (required, at most
// maxBytes), model (required), language, prompt (accepted, unused),
// response_format, temperature (0 to 1), timestamp_granularities[]
// (segment, word), word_timestamps (the contract's spelling of word
// granularity), max_tokens (1 to maxTokens), stream. Word timestamps come
// in verbose_json only.
func parseAudioForm(r *http.Request, maxBytes int64, maxTokens int, translate bool) (*audioRequest, *Error) {
	req := &audioRequest{format: "json"}
	file, haveFile, e := readAudioForm(r, maxBytes, func(name, value string) *Error {
		switch name {
		case "model":
			req.model = value
		case "language":
			if translate {
				return unsupported("language", "Unrecognized request argument supplied: language (translations are always into English).")
			}
			req.language = value
		case "response_format":
			req.format = value
		case "temperature":
			t, err := strconv.ParseFloat(value, 64)
			if err != nil || t < 0 || t > 1 {
				return invalidRequest("temperature", "Invalid 'temperature': %q (expected a number from 0 to 1).", value)
			}
			req.temperature = t
		case "timestamp_granularities[]", "timestamp_granularities":
			switch value {
			case "segment":
			case "word":
				req.words, req.wordsParam = true, name
			default:
				return invalidRequest(name, "Invalid '%s': %q (expected segment or word).", name, value)
			}
		case "stream":
			b, err := strconv.ParseBool(value)
			if err != nil {
				return invalidRequest("stream", "Invalid 'stream': %q (expected true or false).", value)
			}
			req.stream = b
		case "word_timestamps":
			b, err := strconv.ParseBool(value)
			if err != nil {
				return invalidRequest("word_timestamps", "Invalid 'word_timestamps': %q (expected true or false).", value)
			}
			if b {
				req.words, req.wordsParam = true, name
			}
		case "max_tokens":
			n, err := strconv.Atoi(strings.TrimSpace(value))
			if err != nil || n < 1 || n > maxTokens {
				return invalidRequest("max_tokens", "Invalid 'max_tokens': %q (expected an integer from 1 to %d).", value, maxTokens)
			}
			req.maxTokens = n
		case "vad_filter", "batched":
			b, err := strconv.ParseBool(value)
			if err != nil {
				return invalidRequest(name, "Invalid '%s': %q (expected true or false).", name, value)
			}
			if name == "batched" {
				req.batched = b
			} else {
				req.vadFilter = b
			}
		case "vad_parameters":
			req.vadParams = value
		case "prompt", "chunking_strategy", "include[]":
			// Accepted and not used.
		default:
			return unsupported(name, "Unrecognized request argument supplied: %s", name)
		}
		return nil
	})
	if e != nil {
		return nil, e
	}
	req.file = file
	switch {
	case !haveFile:
		return nil, missingParam("file")
	case len(req.file) == 0:
		return nil, invalidRequest("file", "Invalid 'file': the file is empty.")
	case req.model == "":
		return nil, missingParam("model")
	}
	ok := false
	for _, f := range audioFormats {
		ok = ok || f == req.format
	}
	if !ok {
		return nil, invalidRequest("response_format", "Invalid 'response_format': %q (expected one of %s).", req.format, strings.Join(audioFormats, ", "))
	}
	if req.words && req.format != "verbose_json" {
		return nil, invalidRequest(req.wordsParam, "Word timestamps come with response_format 'verbose_json' only, not %q.", req.format)
	}
	if req.vadParams != "" && !req.vadFilter && !req.batched {
		return nil, invalidRequest("vad_parameters", "'vad_parameters' needs vad_filter=true or batched=true.")
	}
	if req.batched && req.words {
		return nil, unsupported(req.wordsParam, "Word timestamps are not available with batched=true.")
	}
	if req.batched && req.maxTokens > 0 {
		return nil, unsupported("max_tokens", "'max_tokens' is not available with batched=true.")
	}
	return req, nil
}

// readAudioForm reads a multipart audio form (a multipart/form-data
// Content-Type, else 400): the "file" part (at most maxBytes) and every
// other field, at most 64 KiB each, handed to field in order; field's
// error stops the read.
func readAudioForm(r *http.Request, maxBytes int64, field func(name, value string) *Error) (file []byte, haveFile bool, e *Error) {
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || ct != "multipart/form-data" {
		return nil, false, &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Code: "invalid_content_type",
			Message: fmt.Sprintf("Invalid Content-Type %q: this endpoint takes multipart/form-data with a 'file' part.", r.Header.Get("Content-Type"))}
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, false, invalidRequest("file", "Invalid multipart body: %v.", err)
	}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return file, haveFile, nil
		}
		if err != nil {
			return nil, false, bodyError(err, "Invalid multipart body: %v.")
		}
		name := part.FormName()
		if name == "file" {
			data, err := io.ReadAll(io.LimitReader(part, maxBytes+1))
			if err != nil {
				return nil, false, bodyError(err, "Reading 'file': %v.")
			}
			if int64(len(data)) > maxBytes {
				return nil, false, invalidRequest("file", "Invalid 'file': larger than this server's limit of %d bytes.", maxBytes)
			}
			file, haveFile = data, true
			continue
		}
		v, err := io.ReadAll(io.LimitReader(part, 64<<10))
		if err != nil {
			return nil, false, bodyError(err, "Invalid multipart body: %v.")
		}
		if e := field(name, string(v)); e != nil {
			return nil, false, e
		}
	}
}

// bodyError is the answer to a failed read of the body: 413 past the
// router's body limit, else a 400.
func bodyError(err error, format string) *Error {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return TooLarge(mb.Limit)
	}
	return invalidRequest("file", format, err)
}

// POST /v1/audio/transcriptions
func (h *Handler) transcriptions(w http.ResponseWriter, r *http.Request) { h.audio(w, r, false) }

// POST /v1/audio/translations
func (h *Handler) translations(w http.ResponseWriter, r *http.Request) { h.audio(w, r, true) }

func (h *Handler) audio(w http.ResponseWriter, r *http.Request, translate bool) {
	maxBytes, maxSeconds := h.audioCaps()
	maxTokens := h.opts.MaxTranscriptionTokens
	if maxTokens <= 0 {
		maxTokens = DefaultMaxTranscriptionTokens
	}
	req, e := parseAudioForm(r, maxBytes, maxTokens, translate)
	if e != nil {
		h.reject(w, r, e)
		return
	}
	t, ok := h.engine.(engine.Transcriber)
	if !ok {
		h.reject(w, r, &Error{Status: http.StatusNotImplemented, Type: TypeInvalidRequest, Code: "unsupported",
			Message: "This server's engine does not transcribe speech."})
		return
	}
	treq := &engine.TranscribeRequest{Model: req.model, Audio: req.file, Language: req.language,
		Translate: translate, Temperature: req.temperature, WordTimestamps: req.words, MaxTokens: req.maxTokens,
		MaxBytes: maxBytes, MaxSeconds: maxSeconds}
	if req.vadFilter || req.batched {
		speech, e := h.speechOf(r, req, maxBytes, maxSeconds)
		if e != nil {
			h.reject(w, r, e)
			return
		}
		treq.VADFilter, treq.Speech, treq.Batched = true, speech, req.batched
	}
	var sse *sseWriter
	if req.stream {
		sse = newSSEWriter(w)
		first := true
		treq.OnSegment = func(s engine.TranscribeSegment) {
			delta := s.Text
			if first {
				delta = strings.TrimLeft(delta, " ")
			}
			first = false
			sse.data(TranscriptDelta{Type: "transcript.text.delta", Delta: delta})
		}
	}
	res, err := t.Transcribe(r.Context(), treq)
	if err != nil {
		ee := engineError(err, req.model)
		if ee.Status == http.StatusBadRequest && ee.Param == "" {
			ee.Param = "file"
		}
		if sse != nil && sse.started {
			h.metrics.Rejected()
			sse.fail(ee)
			return
		}
		h.reject(w, r, ee)
		return
	}
	if sse != nil {
		sse.data(TranscriptDone{Type: "transcript.text.done", Text: res.Text})
		return
	}
	task := "transcribe"
	if translate {
		task = "translate"
	}
	switch req.format {
	case "text":
		writeText(w, "text/plain; charset=utf-8", res.Text+"\n")
	case "srt":
		writeText(w, "application/x-subrip; charset=utf-8", SRT(res.Segments))
	case "vtt":
		writeText(w, "text/vtt; charset=utf-8", VTT(res.Segments))
	case "verbose_json":
		writeJSON(w, http.StatusOK, verboseTranscription(task, res))
	default:
		writeJSON(w, http.StatusOK, Transcription{Text: res.Text, Language: res.Language, Duration: res.Duration})
	}
}

// audioCaps are the upload caps of the audio endpoints (the options', or
// the defaults).
func (h *Handler) audioCaps() (maxBytes int64, maxSeconds float64) {
	maxBytes, maxSeconds = h.opts.MaxAudioBytes, float64(h.opts.MaxAudioSeconds)
	if maxBytes <= 0 {
		maxBytes = DefaultMaxAudioBytes
	}
	if maxSeconds <= 0 {
		maxSeconds = DefaultMaxAudioSeconds
	}
	return maxBytes, maxSeconds
}

func writeText(w http.ResponseWriter, contentType, body string) {
	w.Header().Set("Content-Type", contentType)
	io.WriteString(w, body)
}

// Transcription is the json response_format (the contract's shape:
// OpenAI's text, with the language and the duration).
type Transcription struct {
	Text     string  `json:"text"`
	Language string  `json:"language"`
	Duration float64 `json:"duration"`
}

// TranscriptDelta and TranscriptDone are the events of a streamed
// transcription (stream=true): the text of each segment as it is
// decoded (their concatenation is the text), then the whole text.
type TranscriptDelta struct {
	Type  string `json:"type"` // "transcript.text.delta"
	Delta string `json:"delta"`
}

// TranscriptDone ends a streamed transcription.
type TranscriptDone struct {
	Type string `json:"type"` // "transcript.text.done"
	Text string `json:"text"`
}

// VerboseTranscription is the verbose_json response_format, OpenAI's,
// with faster-whisper's language_probability (the detected language's
// probability; 1 when the request named the language or the model has
// only English).
type VerboseTranscription struct {
	Task                string                 `json:"task"`
	Language            string                 `json:"language"` // the language's name, e.g. "english"
	LanguageProbability float64                `json:"language_probability"`
	Duration            float64                `json:"duration"`
	Text                string                 `json:"text"`
	Segments            []TranscriptionSegment `json:"segments"`
	// Words, with word timestamps: every segment's words in order
	// (OpenAI's shape: the word without the space before it).
	Words []TranscriptionWord `json:"words,omitempty"`
}

// TranscriptionWord is a word of verbose_json.
type TranscriptionWord struct {
	Word  string  `json:"word"`
	Start float64 `json:"start"`
	End   float64 `json:"end"`
}

// TranscriptionSegment is a segment of verbose_json (ids from 0).
type TranscriptionSegment struct {
	ID               int     `json:"id"`
	Seek             int     `json:"seek"`
	Start            float64 `json:"start"`
	End              float64 `json:"end"`
	Text             string  `json:"text"`
	Tokens           []int   `json:"tokens"`
	Temperature      float64 `json:"temperature"`
	AvgLogprob       float64 `json:"avg_logprob"`
	CompressionRatio float64 `json:"compression_ratio"`
	NoSpeechProb     float64 `json:"no_speech_prob"`
}

func verboseTranscription(task string, res *engine.TranscribeResult) VerboseTranscription {
	out := VerboseTranscription{Task: task, Language: languageName(res.Language), LanguageProbability: res.LanguageProbability,
		Duration: res.Duration, Text: res.Text,
		Segments: make([]TranscriptionSegment, len(res.Segments))}
	for i, s := range res.Segments {
		tokens := s.Tokens
		if tokens == nil {
			tokens = []int{}
		}
		out.Segments[i] = TranscriptionSegment{ID: i, Seek: s.Seek, Start: s.Start, End: s.End, Text: s.Text, Tokens: tokens,
			Temperature: s.Temperature, AvgLogprob: s.AvgLogprob, CompressionRatio: s.CompressionRatio, NoSpeechProb: s.NoSpeechProb}
		for _, w := range s.Words {
			out.Words = append(out.Words, TranscriptionWord{Word: strings.TrimSpace(w.Word), Start: w.Start, End: w.End})
		}
	}
	return out
}

// languageName is the English name OpenAI's verbose_json gives a language
// code (the code itself for one not listed).
func languageName(code string) string {
	names := map[string]string{"en": "english", "de": "german", "fr": "french", "es": "spanish", "it": "italian",
		"ja": "japanese", "zh": "chinese", "pt": "portuguese", "ru": "russian", "nl": "dutch", "ko": "korean"}
	if n, ok := names[code]; ok {
		return n
	}
	return code
}

// Timestamp formats a time in seconds as HH:MM:SS plus the milliseconds
// after marker (',' for SubRip, '.' for WebVTT), rounding to the
// millisecond as faster-whisper's format_timestamp does.
func Timestamp(seconds float64, marker string) string {
	ms := int64(seconds*1000 + 0.5)
	if seconds < 0 {
		ms = 0
	}
	h := ms / 3_600_000
	ms -= h * 3_600_000
	m := ms / 60_000
	ms -= m * 60_000
	s := ms / 1000
	ms -= s * 1000
	return fmt.Sprintf("%02d:%02d:%02d%s%03d", h, m, s, marker, ms)
}

// SRT is the segments as SubRip: numbered cues from 1, times with a
// comma, the text trimmed, a blank line after each.
func SRT(segs []engine.TranscribeSegment) string {
	var b strings.Builder
	for i, s := range segs {
		fmt.Fprintf(&b, "%d\n%s --> %s\n%s\n\n", i+1, Timestamp(s.Start, ","), Timestamp(s.End, ","), strings.TrimSpace(s.Text))
	}
	return b.String()
}

// VTT is the segments as WebVTT: the header, then cues with times with a
// dot, the text trimmed, a blank line after each.
func VTT(segs []engine.TranscribeSegment) string {
	var b strings.Builder
	b.WriteString("WEBVTT\n\n")
	for _, s := range segs {
		fmt.Fprintf(&b, "%s --> %s\n%s\n\n", Timestamp(s.Start, "."), Timestamp(s.End, "."), strings.TrimSpace(s.Text))
	}
	return b.String()
}
