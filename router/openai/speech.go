package openai

import (
	"bufio"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"unicode/utf8"

	"fusion/engine"
	"fusion/engine/audio"
)

// DefaultMaxSpeechInput is the default cap of /v1/audio/speech's input
// in characters (Options.MaxSpeechInput): OpenAI's 4096.
const DefaultMaxSpeechInput = 4096

// speechFormats are the response_format values OpenAI defines; only
// wavFormats are produced (the others need an encoder this server does
// not have).
var (
	speechFormats = []string{"mp3", "opus", "aac", "flac", "wav", "pcm"}
	wavFormats    = []string{"wav", "pcm"}
)

// SpeechRequest is the body of POST /v1/audio/speech.
type SpeechRequest struct {
	Model          string   `json:"model"`
	Input          string   `json:"input"`
	Voice          string   `json:"voice"`
	Speed          *float64 `json:"speed,omitempty"`
	ResponseFormat string   `json:"response_format,omitempty"`
	// Instructions and StreamFormat are accepted and ignored (Piper
	// voices take no instructions; the audio is always streamed raw).
	Instructions string `json:"instructions,omitempty"`
	StreamFormat string `json:"stream_format,omitempty"`
}

// Voice is one entry of GET /v1/audio/voices.
type Voice struct {
	ID         string `json:"id"`
	Object     string `json:"object"` // "voice"
	Model      string `json:"model"`
	SampleRate int    `json:"sample_rate,omitempty"`
}

// VoiceList is the answer of GET /v1/audio/voices.
type VoiceList struct {
	Object string  `json:"object"` // "list"
	Data   []Voice `json:"data"`
}

// check validates the request against OpenAI's rules and this server's
// input limit, and fills the defaults. A missing response_format is wav,
// not OpenAI's mp3: this server has no mp3 encoder, and a client that did
// not choose a format is better served audio it can play (the answer's
// Content-Type says what it is) than a 400; an explicit mp3 is refused.
func (req *SpeechRequest) check(maxInput int) *Error {
	switch {
	case req.Model == "":
		return missingParam("model")
	case req.Input == "":
		return missingParam("input")
	case req.Voice == "":
		return missingParam("voice")
	}
	if n := utf8.RuneCountInString(req.Input); n > maxInput {
		return invalidRequest("input", "Invalid 'input': string too long. Expected a string with maximum length %d, but got a string with length %d instead.", maxInput, n)
	}
	if req.Speed != nil && !(*req.Speed >= engine.MinSpeechSpeed && *req.Speed <= engine.MaxSpeechSpeed) {
		return invalidRequest("speed", "Invalid 'speed': %v is not between %v and %v.", *req.Speed, engine.MinSpeechSpeed, engine.MaxSpeechSpeed)
	}
	if req.ResponseFormat == "" {
		req.ResponseFormat = "wav"
	}
	if !slices.Contains(wavFormats, req.ResponseFormat) {
		if slices.Contains(speechFormats, req.ResponseFormat) {
			return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: "response_format", Code: "unsupported_value",
				Message: fmt.Sprintf("response_format %q is not supported by this server; use \"wav\" or \"pcm\" (16-bit mono at the voice's rate).", req.ResponseFormat)}
		}
		return invalidRequest("response_format", "Invalid 'response_format': %q is not one of %v.", req.ResponseFormat, speechFormats)
	}
	return nil
}

// POST /v1/audio/speech. The audio is streamed as the sentences are
// synthesized (chunked): wav is a 16-bit mono WAV whose header carries
// the "unknown length" sizes, pcm the raw little-endian 16-bit samples at
// the voice's rate (X-Sample-Rate names it; Piper's medium voices are
// 22050 Hz). Errors before the first sentence are OpenAI error objects;
// after it the stream is cut.
func (h *Handler) speech(w http.ResponseWriter, r *http.Request) {
	var req SpeechRequest
	if e := decodeUTF8Body(r, &req); e != nil {
		h.reject(w, r, e)
		return
	}
	maxInput := h.opts.MaxSpeechInput
	if maxInput <= 0 {
		maxInput = DefaultMaxSpeechInput
	}
	if e := req.check(maxInput); e != nil {
		h.reject(w, r, e)
		return
	}
	sp, ok := h.engine.(engine.Speaker)
	if !ok {
		h.reject(w, r, &Error{Status: http.StatusNotImplemented, Type: TypeInvalidRequest, Code: "unsupported",
			Message: "This server's engine does not synthesize speech."})
		return
	}
	ereq := &engine.SpeechRequest{Model: req.Model, Input: req.Input, Voice: req.Voice}
	if req.Speed != nil {
		ereq.Speed = *req.Speed
	}
	bw := bufio.NewWriter(w)
	flusher, _ := w.(http.Flusher)
	started := false
	ereq.OnAudio = func(a engine.SpeechAudio) error {
		if !started {
			started = true
			w.Header().Set("X-Sample-Rate", strconv.Itoa(a.SampleRate))
			if req.ResponseFormat == "wav" {
				w.Header().Set("Content-Type", "audio/wav")
				w.WriteHeader(http.StatusOK)
				if err := audio.WriteWAVHeader(bw, a.SampleRate, -1); err != nil {
					return err
				}
			} else {
				w.Header().Set("Content-Type", "audio/pcm")
				w.WriteHeader(http.StatusOK)
			}
		}
		if err := audio.WritePCM16(bw, a.PCM); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	}
	if _, err := sp.Speak(r.Context(), ereq); err != nil {
		if started {
			h.log.Warn("speech failed after its first sentences", "model", req.Model, "err", err)
			// Cut the chunked stream: the client sees a broken body, not
			// a short but well-formed file.
			panic(http.ErrAbortHandler)
		}
		h.reject(w, r, engineError(err, req.Model))
	}
}

// GET /v1/audio/voices: every voice of every speech model the cluster
// lists (a Piper voice model has one, "default").
func (h *Handler) voices(w http.ResponseWriter, r *http.Request) {
	models, err := h.engine.Models(r.Context())
	if err != nil {
		h.reject(w, r, FromEngine(err))
		return
	}
	out := VoiceList{Object: "list", Data: []Voice{}}
	for _, m := range models {
		if m.Kind == engine.KindSpeech {
			out.Data = append(out.Data, Voice{ID: engine.DefaultVoice, Object: "voice", Model: m.ID})
		}
	}
	writeJSON(w, http.StatusOK, out)
}
