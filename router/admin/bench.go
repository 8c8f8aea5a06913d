package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"fusion/jobs"
	"fusion/router/openai"
)

// Bench is what the benchmark and profile routes need of the node.
type Bench interface {
	// Run starts a throughput benchmark job on this node (ErrNoModel for
	// a model it does not have).
	Run(ctx context.Context, req BenchRunRequest) (jobs.Job, error)
	// Accuracy starts an accuracy job (perplexity) on this node.
	Accuracy(ctx context.Context, req AccuracyRequest) (jobs.Job, error)
	// Profiles are the measured profiles of model ("" every model), in a
	// cluster every node's.
	Profiles(model string) []Profile
}

// BenchRunRequest is the body of POST /admin/api/bench/run.
type BenchRunRequest struct {
	Model string `json:"model"`
	// PromptLengths are the prompt sizes in tokens (default [128]);
	// Concurrency the numbers of streams run at once (default [1]);
	// GenerationLength the tokens generated per stream (default 32).
	PromptLengths    []int  `json:"prompt_lengths,omitempty"`
	Concurrency      []int  `json:"concurrency,omitempty"`
	GenerationLength int    `json:"generation_length,omitempty"`
	Node             string `json:"node,omitempty"`
}

// AccuracyRequest is the body of POST /admin/api/bench/accuracy.
type AccuracyRequest struct {
	Model string `json:"model"`
	// Text is scored (default a bundled English text); Window is the
	// context of each scored window in tokens (default the whole text).
	Text   string `json:"text,omitempty"`
	Window int    `json:"window,omitempty"`
	// Compare is another model (its float original, say) scored on the
	// same text in the same job.
	Compare string `json:"compare,omitempty"`
	Node    string `json:"node,omitempty"`
	// MultipleChoice is how many questions of the generated
	// multiple-choice set to score the model (and compare) on besides
	// the perplexity (0: none).
	MultipleChoice int `json:"multiple_choice,omitempty"`
}

// Profile is one measurement of one model on one node.
type Profile struct {
	Model   string          `json:"model"`
	Node    string          `json:"node"`
	Kind    string          `json:"kind"` // "throughput" or "accuracy"
	JobID   string          `json:"job_id"`
	Updated time.Time       `json:"updated_at"`
	Result  json.RawMessage `json:"result"`
}

// ProfileList is the answer of GET /admin/api/profiles.
type ProfileList struct {
	Object string    `json:"object"`
	Data   []Profile `json:"data"`
}

// Limits of the benchmark routes.
const (
	maxBenchBody      = 256 << 10
	MaxBenchPoints    = 8      // prompt lengths, and concurrency levels
	MaxBenchPrompt    = 32768  // tokens
	MaxBenchGenerate  = 4096   // tokens
	MaxBenchStreams   = 64     // concurrency
	MaxAccuracyText   = 200000 // bytes
	MaxAccuracyWindow = 8192   // tokens
	MaxAccuracyChoice = 1000   // multiple-choice questions
)

func (h *Handler) mountBench(r chi.Router) {
	if h.cfg.Bench == nil || h.cfg.Jobs == nil {
		return
	}
	r.Post("/admin/api/bench/run", h.benchRun)
	r.Post("/admin/api/bench/accuracy", h.benchAccuracy)
	r.Get("/admin/api/profiles", h.profiles)
	r.Get("/admin/api/profiles/{model}", h.profiles)
}

func (h *Handler) profiles(w http.ResponseWriter, r *http.Request) {
	list := h.cfg.Bench.Profiles(chi.URLParam(r, "model"))
	if list == nil {
		list = []Profile{}
	}
	openai.WriteJSON(w, http.StatusOK, ProfileList{Object: "list", Data: list})
}

func (h *Handler) benchRun(w http.ResponseWriter, r *http.Request) {
	req, ok := jobRequest(h, w, r, maxBenchBody, checkBenchRun, "model", "prompt_lengths", "concurrency", "generation_length", "node")
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), startWait)
	defer cancel()
	j, err := h.cfg.Bench.Run(ctx, req)
	if !writeNoModel(w, err) {
		writeJobStarted(w, "benchmark", j, err)
	}
}

func (h *Handler) benchAccuracy(w http.ResponseWriter, r *http.Request) {
	req, ok := jobRequest(h, w, r, maxBenchBody, checkAccuracy, "model", "text", "window", "compare", "node", "multiple_choice")
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), startWait)
	defer cancel()
	j, err := h.cfg.Bench.Accuracy(ctx, req)
	if !writeNoModel(w, err) {
		writeJobStarted(w, "accuracy benchmark", j, err)
	}
}

func checkAccuracy(req AccuracyRequest) *openai.Error {
	switch {
	case req.Model == "":
		return openai.MissingParam("model")
	case !plainName(req.Model):
		return openai.InvalidRequest("model", "model must be a model directory's name in the models directory.")
	case req.Compare != "" && !plainName(req.Compare):
		return openai.InvalidRequest("compare", "compare must be a model directory's name in the models directory.")
	case len(req.Text) > MaxAccuracyText:
		return openai.InvalidRequest("text", "text is at most %d bytes.", MaxAccuracyText)
	case req.Window < 0 || req.Window == 1 || req.Window > MaxAccuracyWindow:
		return openai.InvalidRequest("window", "window is 2 to %d tokens (0: the whole text).", MaxAccuracyWindow)
	case req.MultipleChoice < 0 || req.MultipleChoice > MaxAccuracyChoice:
		return openai.InvalidRequest("multiple_choice", "multiple_choice is 0 to %d questions.", MaxAccuracyChoice)
	}
	return nil
}

// writeNoModel answers ErrNoModel with a 404.
func writeNoModel(w http.ResponseWriter, err error) bool {
	if !errors.Is(err, ErrNoModel) {
		return false
	}
	openai.WriteError(w, &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Param: "model", Code: "model_not_found", Message: err.Error()})
	return true
}

func checkBenchRun(req BenchRunRequest) *openai.Error {
	if req.Model == "" {
		return openai.MissingParam("model")
	}
	if len(req.PromptLengths) > MaxBenchPoints || len(req.Concurrency) > MaxBenchPoints {
		return openai.InvalidRequest("prompt_lengths", "At most %d prompt lengths and %d concurrency levels.", MaxBenchPoints, MaxBenchPoints)
	}
	for i, n := range req.PromptLengths {
		if n < 1 || n > MaxBenchPrompt {
			return openai.InvalidRequest(fmt.Sprintf("prompt_lengths[%d]", i), "A prompt length is 1 to %d tokens.", MaxBenchPrompt)
		}
	}
	for i, n := range req.Concurrency {
		if n < 1 || n > MaxBenchStreams {
			return openai.InvalidRequest(fmt.Sprintf("concurrency[%d]", i), "A concurrency level is 1 to %d streams.", MaxBenchStreams)
		}
	}
	if req.GenerationLength < 0 || req.GenerationLength > MaxBenchGenerate {
		return openai.InvalidRequest("generation_length", "generation_length is 1 to %d tokens.", MaxBenchGenerate)
	}
	return nil
}
