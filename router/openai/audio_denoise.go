package openai

import (
	"net/http"

	"fusion/engine"
	"fusion/engine/audio"
	"fusion/engine/audio/process"
)

// audioDenoise answers task denoise: the uploaded file goes as it is to
// the node that has the model (an RNNoise denoiser), which decodes it and
// removes the noise; the answer is the denoised audio as mono 16-bit PCM
// WAV at the upload's sample rate, as the signal tasks answer.
func (h *Handler) audioDenoise(w http.ResponseWriter, r *http.Request, model string, file []byte) {
	d, ok := h.engine.(engine.SpeechDenoiser)
	if !ok {
		h.reject(w, r, &Error{Status: http.StatusNotImplemented, Type: TypeInvalidRequest, Code: "unsupported",
			Message: "This server's engine does not denoise."})
		return
	}
	maxBytes, maxSeconds := h.audioCaps()
	res, err := d.Denoise(r.Context(), &engine.DenoiseRequest{Model: model, Audio: file, MaxBytes: maxBytes, MaxSeconds: maxSeconds})
	if err != nil {
		h.reject(w, r, modelTaskError(err, model, "does not denoise"))
		return
	}
	wav, err := process.WAV(audio.Signal{Rate: res.Rate, Channels: 1, Samples: res.Samples})
	if err != nil {
		h.reject(w, r, invalidRequest("file", "%v.", err))
		return
	}
	w.Header().Set("Content-Type", "audio/wav")
	w.Write(wav)
}
