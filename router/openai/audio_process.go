package openai

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"fusion/engine/audio"
	"fusion/engine/audio/process"
)

// POST /v1/audio/process: file, model, task (the contract's fields) and
// the task's parameters sample_rate, target_lufs, threshold_db. The tasks
// (package process: resample, normalize, trim) are signal processing
// without a model, run on the node that receives the request: model
// names the processing and is required, as the contract has it, but no
// model is loaded. The answer is the processed audio as 16-bit PCM WAV;
// normalize adds the measured loudness in X-Input-LUFS and
// X-Output-LUFS. The upload caps are the transcriptions'. Task vad runs
// a model and answers JSON (audio_vad.go); task denoise runs a model and
// answers WAV (audio_denoise.go).
func (h *Handler) audioProcess(w http.ResponseWriter, r *http.Request) {
	maxBytes, maxSeconds := h.audioCaps()
	var model, task string
	var p process.Params
	// A field sent is a value, checked by the task (0 included); an
	// absent one is the task's default.
	vad := newVADForm()
	number := func(name, value string, set func(float64)) *Error {
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return invalidRequest(name, "Invalid '%s': %q (expected a number).", name, value)
		}
		set(v)
		return nil
	}
	file, haveFile, e := readAudioForm(r, maxBytes, func(name, value string) *Error {
		switch name {
		case "model":
			model = value
		case "task":
			task = value
		case "sample_rate":
			r, err := strconv.Atoi(strings.TrimSpace(value))
			if err != nil {
				return invalidRequest(name, "Invalid '%s': %q (expected an integer).", name, value)
			}
			p.SampleRate = &r
		case "target_lufs":
			return number(name, value, func(v float64) { p.TargetLUFS = &v })
		case "threshold_db":
			return number(name, value, func(v float64) { p.ThresholdDB = &v })
		default:
			if ok, e := vad.field(name, value); ok {
				return e
			}
			return unsupported(name, "Unrecognized request argument supplied: %s", name)
		}
		return nil
	})
	switch {
	case e != nil:
	case !haveFile:
		e = missingParam("file")
	case len(file) == 0:
		e = invalidRequest("file", "Invalid 'file': the file is empty.")
	case model == "":
		e = missingParam("model")
	case task == "":
		e = missingParam("task")
	}
	if e != nil {
		h.reject(w, r, e)
		return
	}
	if task == "vad" {
		h.audioVAD(w, r, model, file, vad)
		return
	}
	if task == "denoise" {
		h.audioDenoise(w, r, model, file)
		return
	}
	sig, err := audio.DecodeBytes(r.Context(), file, audio.Options{MaxBytes: maxBytes, MaxDuration: time.Duration(maxSeconds * float64(time.Second))})
	if err != nil {
		var ae *audio.Error
		if errors.As(err, &ae) {
			h.reject(w, r, invalidRequest("file", "Invalid 'file': %v.", err))
			return
		}
		WriteError(w, engineError(err, model))
		return
	}
	res, err := process.Run(r.Context(), task, sig, p)
	switch {
	case errors.Is(err, process.ErrTask):
		h.reject(w, r, invalidRequest("task", "Invalid 'task': %q (supported: %s).", task, strings.Join(processTasks, ", ")))
		return
	case errors.Is(err, process.ErrParams):
		// A parameter's error names it; the rest are the signal's (silent,
		// too short for the task).
		param := "file"
		if pe := (*process.ParamError)(nil); errors.As(err, &pe) {
			param = pe.Param
		}
		h.reject(w, r, invalidRequest(param, "%v.", err))
		return
	case err != nil:
		WriteError(w, engineError(err, model))
		return
	}
	if task == "normalize" {
		w.Header().Set("X-Input-LUFS", strconv.FormatFloat(res.InputLUFS, 'f', 2, 64))
		w.Header().Set("X-Output-LUFS", strconv.FormatFloat(res.OutputLUFS, 'f', 2, 64))
	}
	wav, err := process.WAV(res.Signal)
	if err != nil {
		h.reject(w, r, invalidRequest("file", "%v.", err))
		return
	}
	w.Header().Set("Content-Type", "audio/wav")
	w.Write(wav)
}
