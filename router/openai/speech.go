package openai

import (
	"fmt"
	"io"
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
// not OpenAI's mp3: the contract's answer is WAV, and wav needs no
// ffmpeg. Every format of OpenAI's is made (package audio's encoders:
// wav, pcm and flac in Go, mp3, opus and aac through ffmpeg); one that
// needs ffmpeg on a server without it is a 400 naming ffmpeg.
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
	if !slices.Contains(audio.EncodeFormats, req.ResponseFormat) {
		return invalidRequest("response_format", "Invalid 'response_format': %q is not one of %v.", req.ResponseFormat, audio.EncodeFormats)
	}
	if err := audio.CheckEncoder(req.ResponseFormat, audio.EncodeOptions{}); err != nil {
		return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: "response_format", Code: "unsupported_value",
			Message: fmt.Sprintf("response_format %q is not available on this server: %v; wav, pcm and flac are.", req.ResponseFormat, err)}
	}
	return nil
}

// POST /v1/audio/speech. The audio is streamed as the sentences are
// synthesized (chunked), encoded in response_format by package audio as
// it comes: wav is a 16-bit mono WAV whose header carries the "unknown
// length" sizes, pcm the raw little-endian 16-bit samples at the voice's
// rate (X-Sample-Rate names it; Piper's medium voices are 22050 Hz), flac
// a FLAC stream without the total length, mp3, opus (Ogg) and aac (ADTS)
// ffmpeg's. Errors before the first sentence are OpenAI error objects;
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
	flusher, _ := w.(http.Flusher)
	var enc audio.Encoder
	started := false
	ereq.OnAudio = func(a engine.SpeechAudio) error {
		if !started {
			started = true
			w.Header().Set("X-Sample-Rate", strconv.Itoa(a.SampleRate))
			w.Header().Set("Content-Type", audio.ContentType(req.ResponseFormat))
			w.WriteHeader(http.StatusOK)
			var err error
			enc, err = audio.NewEncoder(r.Context(), flushWriter{w, flusher}, req.ResponseFormat, a.SampleRate, audio.EncodeOptions{})
			if err != nil {
				return err
			}
		}
		return enc.Write(a.PCM)
	}
	_, err := sp.Speak(r.Context(), ereq)
	if enc != nil {
		// The last FLAC block, the rest of ffmpeg's output.
		if cerr := enc.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		if started {
			h.log.Warn("speech failed after its first sentences", "model", req.Model, "format", req.ResponseFormat, "err", err)
			// Cut the chunked stream: the client sees a broken body, not
			// a short but well-formed file.
			panic(http.ErrAbortHandler)
		}
		h.reject(w, r, engineError(err, req.Model))
	}
}

// flushWriter flushes the response after every write, so that the audio
// goes out as it is encoded.
type flushWriter struct {
	w io.Writer
	f http.Flusher
}

func (fw flushWriter) Write(p []byte) (int, error) {
	n, err := fw.w.Write(p)
	if err == nil && fw.f != nil {
		fw.f.Flush()
	}
	return n, err
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
