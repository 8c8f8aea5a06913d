package admin

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"fusion/engine/quant"
	"fusion/jobs"
	"fusion/router/openai"
)

// Quantizer is what the oQ route needs of the node.
type Quantizer interface {
	// Quantize checks req against this node's models (ErrNoModel,
	// ErrNameTaken, quant.ErrUnsupported) and starts the job.
	Quantize(ctx context.Context, req OQRequest) (jobs.Job, error)
}

// Errors a Quantizer answers before starting a job.
var (
	ErrNoModel   = errors.New("no such model in this node's models directory")
	ErrNameTaken = errors.New("the output name is taken in the models directory")
)

// OQRequest is the body of POST /admin/api/oq/start.
type OQRequest struct {
	// Model is the float source: a model of the node's models directory
	// (a directory's name, BF16/F16/F32 safetensors, or a float GGUF
	// file's model id, its name without .gguf, or with it), or any other
	// model id the node lists (a Hugging Face cache's ORG/NAME). A
	// quantized GGUF is refused (400): re-quantizing loses accuracy.
	Model string `json:"model"`
	// Bits (default 4) and GroupSize (default 64): the uniform setting,
	// the base of a mixed one.
	Bits      int `json:"bits,omitempty"`
	GroupSize int `json:"group_size,omitempty"`
	// TargetBits asks for mixed precision at that average of true bits
	// per quantized weight (codes, scales and biases: 4-bit in groups of
	// 64 with bf16 scales is 4.5); HighBits is the precision of the
	// raised tensors (default 8).
	TargetBits float64 `json:"target_bits,omitempty"`
	HighBits   int     `json:"high_bits,omitempty"`
	// Name is the new model's name, a plain name in the models directory
	// (default <model>-oq<bits>, or -oq<target_bits> for a mixed plan,
	// <model> being the source id's last element).
	Name string `json:"name,omitempty"`
	// Evaluate measures the perplexity of the source and the result on a
	// bundled text and reports both.
	Evaluate bool `json:"evaluate,omitempty"`
	// Node runs the job (default the node asked).
	Node string `json:"node,omitempty"`
	// Format is "mlx" (default) or "gguf": one GGUF file of Type (Q8_0,
	// Q4_K_M, Q6_K, Q5_K_M, Q3_K_M or Q2_K) named <name>.gguf, bits and
	// group_size unused.
	Format string `json:"format,omitempty"`
	Type   string `json:"type,omitempty"`
	// Calibrate (with target_bits) measures each tensor's sensitivity on
	// a calibration text, the model's prediction divergence when that
	// tensor alone is quantized, instead of its own weight error: on the
	// bundled text (quant.CalibrationText), or on CalibrationText when
	// given (which implies calibrate).
	Calibrate       bool   `json:"calibrate,omitempty"`
	CalibrationText string `json:"calibration_text,omitempty"`
}

// Calibration is the text the request's plan is calibrated on ("":
// none).
func (r OQRequest) Calibration() string {
	switch {
	case r.CalibrationText != "":
		return r.CalibrationText
	case r.Calibrate:
		return quant.CalibrationText
	}
	return ""
}

// maxOQBody bounds the request, a calibration text included.
const maxOQBody = 64 << 10

func (h *Handler) oqStart(w http.ResponseWriter, r *http.Request) {
	req, ok := jobRequest(h, w, r, maxOQBody, checkOQ, "model", "bits", "group_size", "target_bits", "high_bits", "name", "evaluate", "node", "format", "type", "calibrate", "calibration_text")
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), startWait)
	defer cancel()
	j, err := h.cfg.Quantizer.Quantize(ctx, req)
	switch {
	case errors.Is(err, ErrNoModel):
		openai.WriteError(w, &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Param: "model", Code: "model_not_found", Message: err.Error()})
		return
	case errors.Is(err, ErrNameTaken):
		openai.WriteError(w, &openai.Error{Status: http.StatusConflict, Type: openai.TypeInvalidRequest, Param: "name", Code: "model_exists", Message: err.Error()})
		return
	case errors.Is(err, quant.ErrUnsupported), errors.Is(err, quant.ErrBadOptions):
		openai.WriteError(w, openai.InvalidRequest("model", "%v", err))
		return
	}
	writeJobStarted(w, "quantization", j, err)
}

// plainName reports whether s names an entry of the models directory:
// a plain, visible file name.
func plainName(s string) bool {
	return s != "" && !strings.ContainsAny(s, "/\\\x00") && !strings.HasPrefix(s, ".") && len(s) <= 200
}

// modelID reports whether s may be a model id a node lists: a plain name,
// or path elements that are (a Hugging Face cache's ORG/NAME, with
// @REVISION), none hidden or "..".
func modelID(s string) bool {
	if s == "" || len(s) > 200 || strings.ContainsAny(s, "\\\x00") {
		return false
	}
	for _, e := range strings.Split(s, "/") {
		if !plainName(e) {
			return false
		}
	}
	return true
}

func checkOQ(req OQRequest) *openai.Error {
	if req.Model == "" {
		return openai.MissingParam("model")
	}
	if !modelID(req.Model) {
		return openai.InvalidRequest("model", "model must be a model id the node lists: a name in its models directory (a directory, or a .gguf file), or a Hugging Face cache's ORG/NAME.")
	}
	if req.Name != "" && !plainName(req.Name) {
		return openai.InvalidRequest("name", "name must be a plain file name, not hidden.")
	}
	o := quant.Options{Bits: req.Bits, GroupSize: req.GroupSize, TargetBits: req.TargetBits, HighBits: req.HighBits, Format: req.Format, GGUFType: req.Type,
		Calibration: req.Calibration()}
	if err := o.Validate(); err != nil {
		param := "bits"
		switch {
		case strings.Contains(err.Error(), "calibration"):
			param = "calibrate"
			if req.CalibrationText != "" {
				param = "calibration_text"
			}
		case req.TargetBits != 0 && strings.Contains(err.Error(), "target_bits"):
			param = "target_bits"
		case strings.Contains(err.Error(), "GGUF type"):
			param = "type"
		case strings.Contains(err.Error(), "format"):
			param = "format"
		case req.GroupSize != 0 && strings.Contains(err.Error(), "group"):
			param = "group_size"
		}
		return openai.InvalidRequest(param, "%v (bits 2, 3, 4, 5, 6 or 8; group_size 32, 64 or 128; target_bits in true bits per weight (codes, scales and biases) above bits, at most high_bits plus its scales; format mlx or gguf, type Q8_0, Q4_K_M, Q6_K, Q5_K_M, Q3_K_M or Q2_K; calibrate with target_bits).", err)
	}
	return nil
}
