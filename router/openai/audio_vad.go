package openai

import (
	"errors"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"fusion/engine"
	"fusion/engine/audio/process"
	"fusion/engine/silero"
)

// processTasks are the tasks of /v1/audio/process, in the order an error
// lists them: package process's signal processing, then vad and denoise
// (models').
var processTasks = append(slices.Clone(process.Tasks), "vad", "denoise")

// vadForm collects the vad task's form fields (faster-whisper's
// VadOptions, under their names there) over silero's defaults.
type vadForm struct {
	opts silero.Options
}

func newVADForm() *vadForm { return &vadForm{opts: silero.DefaultOptions()} }

// field takes the form field name if it is one of vad's, answering
// whether it was and the 400 of a value that is not a number (or not a
// whole one for the _ms fields). Ranges are checked by check.
func (v *vadForm) field(name, value string) (bool, *Error) {
	num := func(set func(float64)) *Error {
		f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return invalidRequest(name, "Invalid '%s': %q (expected a number).", name, value)
		}
		set(f)
		return nil
	}
	ms := func(dst *int) *Error {
		n, err := strconv.Atoi(strings.TrimSpace(value))
		if err != nil {
			return invalidRequest(name, "Invalid '%s': %q (expected a whole number of milliseconds).", name, value)
		}
		*dst = n
		return nil
	}
	var e *Error
	switch name {
	case "threshold":
		e = num(func(f float64) { v.opts.Threshold = f })
	case "neg_threshold":
		e = num(func(f float64) { v.opts.NegThreshold = f })
	case "max_speech_duration_s":
		e = num(func(f float64) { v.opts.MaxSpeechSeconds = f })
	case "min_speech_duration_ms":
		e = ms(&v.opts.MinSpeechMS)
	case "min_silence_duration_ms":
		e = ms(&v.opts.MinSilenceMS)
	case "speech_pad_ms":
		e = ms(&v.opts.SpeechPadMS)
	default:
		return false, nil
	}
	return true, e
}

// check is the 400 of options out of range, naming the field.
func (v *vadForm) check() *Error {
	var oe *silero.OptionError
	if err := v.opts.Validate(); errors.As(err, &oe) {
		return invalidRequest(oe.Name, "Invalid '%s': %s.", oe.Name, oe.Msg)
	}
	return nil
}

// VADSegment is a stretch of speech, in seconds.
type VADSegment struct {
	Start float64 `json:"start"`
	End   float64 `json:"end"`
}

// VADResponse is the answer of task vad.
type VADResponse struct {
	Task     string       `json:"task"`
	Duration float64      `json:"duration"`
	Segments []VADSegment `json:"segments"`
}

// modelTaskError is the answer to the engine's error for a model task of
// /v1/audio/process: a 400 that names no field names the model when its
// message has refusal (the engine's refusal of a model of another kind),
// the file otherwise (audio the node cannot decode).
func modelTaskError(err error, model, refusal string) *Error {
	ee := engineError(err, model)
	if ee.Status == http.StatusBadRequest && ee.Param == "" {
		ee.Param = "file"
		if strings.Contains(ee.Message, refusal) {
			ee.Param = "model"
		}
	}
	return ee
}

// audioVAD answers task vad: the uploaded file goes as it is to the node
// that has the model (a Silero VAD), which decodes it and finds the
// speech; the answer is JSON.
func (h *Handler) audioVAD(w http.ResponseWriter, r *http.Request, model string, file []byte, v *vadForm) {
	if e := v.check(); e != nil {
		h.reject(w, r, e)
		return
	}
	d, ok := h.engine.(engine.SpeechDetector)
	if !ok {
		h.reject(w, r, &Error{Status: http.StatusNotImplemented, Type: TypeInvalidRequest, Code: "unsupported",
			Message: "This server's engine does not detect speech."})
		return
	}
	maxBytes, maxSeconds := h.audioCaps()
	o := v.opts
	res, err := d.DetectSpeech(r.Context(), &engine.VADRequest{Model: model, Audio: file, MaxBytes: maxBytes, MaxSeconds: maxSeconds,
		Threshold: o.Threshold, NegThreshold: o.NegThreshold, MinSpeechMS: o.MinSpeechMS, MinSilenceMS: o.MinSilenceMS,
		SpeechPadMS: o.SpeechPadMS, MaxSpeechSeconds: o.MaxSpeechSeconds})
	if err != nil {
		h.reject(w, r, modelTaskError(err, model, "does not detect speech"))
		return
	}
	out := VADResponse{Task: "vad", Duration: res.Duration, Segments: make([]VADSegment, len(res.Segments))}
	for i, s := range res.Segments {
		out.Segments[i] = VADSegment{Start: s.Start, End: s.End}
	}
	writeJSON(w, http.StatusOK, out)
}
