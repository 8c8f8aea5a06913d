package openai

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"fusion/engine"
	"fusion/engine/silero"
)

// DefaultVADModel is the model vad_filter and batched transcriptions
// find speech with (Options.VADModel, --vad-model): the Silero VAD of the
// models directory.
const DefaultVADModel = "silero-vad"

// vadFilterOptions are the VAD options of a transcription, as
// faster-whisper sets them: for vad_filter its VadOptions() with
// vad_parameters over them; batched (BatchedInferencePipeline) without
// vad_parameters 160 ms of silence and segments of at most 30 s, with
// them VadOptions() with vad_parameters over them and at most 30 s
// whatever they say. vad_parameters is a JSON object of the option
// fields /v1/audio/process takes for task vad (threshold,
// neg_threshold, min_speech_duration_ms, max_speech_duration_s,
// min_silence_duration_ms, speech_pad_ms): faster-whisper's dict.
func vadFilterOptions(params string, batched bool) (silero.Options, *Error) {
	v := newVADForm()
	if batched && params == "" {
		v.opts.MinSilenceMS = 160
	}
	if params != "" {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal([]byte(params), &fields); err != nil || fields == nil {
			return v.opts, invalidRequest("vad_parameters", "Invalid 'vad_parameters': expected a JSON object of VAD options (threshold, neg_threshold, min_speech_duration_ms, max_speech_duration_s, min_silence_duration_ms, speech_pad_ms).")
		}
		for name, raw := range fields {
			ok, e := v.field(name, string(raw))
			if !ok {
				return v.opts, invalidRequest("vad_parameters", "Invalid 'vad_parameters': unknown option %q (expected threshold, neg_threshold, min_speech_duration_ms, max_speech_duration_s, min_silence_duration_ms, speech_pad_ms).", name)
			}
			if e != nil {
				e.Message = "Invalid 'vad_parameters': " + e.Message
				e.Param = "vad_parameters"
				return v.opts, e
			}
		}
	}
	if batched {
		v.opts.MaxSpeechSeconds = float64(engine.MaxPieceSamples) / silero.SampleRate
	}
	if e := v.check(); e != nil {
		e.Message = "Invalid 'vad_parameters': " + e.Message
		e.Param = "vad_parameters"
		return v.opts, e
	}
	return v.opts, nil
}

// speechOf finds the speech of a vad_filter or batched transcription's
// file with the VAD model (Options.VADModel), wherever in the cluster it
// is: the ranges the node that has the ASR model transcribes. A VAD
// model that is not there, or is not a VAD, is a 400 naming it.
func (h *Handler) speechOf(r *http.Request, req *audioRequest, maxBytes int64, maxSeconds float64) ([]engine.SpeechRange, *Error) {
	param := "vad_filter"
	if req.batched {
		param = "batched"
	}
	o, e := vadFilterOptions(req.vadParams, req.batched)
	if e != nil {
		return nil, e
	}
	model := h.opts.VADModel
	if model == "" {
		model = DefaultVADModel
	}
	d, ok := h.engine.(engine.SpeechDetector)
	if !ok {
		return nil, invalidRequest(param, "'%s' needs a VAD model, and this server's engine does not detect speech.", param)
	}
	res, err := d.DetectSpeech(r.Context(), &engine.VADRequest{Model: model, Audio: req.file, MaxBytes: maxBytes, MaxSeconds: maxSeconds,
		Threshold: o.Threshold, NegThreshold: o.NegThreshold, MinSpeechMS: o.MinSpeechMS, MinSilenceMS: o.MinSilenceMS,
		SpeechPadMS: o.SpeechPadMS, MaxSpeechSeconds: o.MaxSpeechSeconds})
	if err != nil {
		ee := engineError(err, model)
		switch {
		case errors.Is(err, engine.ErrModelNotFound):
			return nil, invalidRequest(param, "'%s' needs the VAD model %q (the server's --vad-model), which is not on this server or its cluster.", param, model)
		case ee.Status == http.StatusBadRequest && strings.Contains(ee.Message, "does not detect speech"):
			return nil, invalidRequest(param, "'%s' needs a VAD model, and %q (the server's --vad-model) is not one: %s", param, model, ee.Message)
		case ee.Status == http.StatusBadRequest && ee.Param == "":
			ee.Param = "file"
		}
		return nil, ee
	}
	return engine.SpeechRanges(res.Segments), nil
}
