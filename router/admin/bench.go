package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"time"

	"github.com/go-chi/chi/v5"

	"fusion/engine/quant"
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
	// GenerationLengths the tokens generated per stream (default [32]);
	// each (prompt length, concurrency, generation length) is a point.
	// GenerationLength is the one-element form of GenerationLengths.
	PromptLengths     []int  `json:"prompt_lengths,omitempty"`
	Concurrency       []int  `json:"concurrency,omitempty"`
	GenerationLengths []int  `json:"generation_lengths,omitempty"`
	GenerationLength  int    `json:"generation_length,omitempty"`
	Node              string `json:"node,omitempty"`
	// Nodes runs the benchmark on several nodes instead: "each" node
	// holding the model, or a list of node ids (see BenchNodes).
	Nodes *BenchNodes `json:"nodes,omitempty"`
}

// Generations are the request's generation lengths (its
// generation_length as one, none when it gives neither).
func (q BenchRunRequest) Generations() []int {
	if len(q.GenerationLengths) == 0 && q.GenerationLength > 0 {
		return []int{q.GenerationLength}
	}
	return q.GenerationLengths
}

// EachNode is the value of "nodes" that asks for every node holding the
// model.
const EachNode = "each"

// BenchNodes is a benchmark request's "nodes": the string "each" (every
// live node holding the model, on disk or loaded, as the cluster's
// inventories say) or an array of node ids. The node asked runs one job
// that starts the benchmark's job on each of them and follows them; each
// of those records its own profile.
type BenchNodes struct {
	Each bool
	IDs  []string
}

// UnmarshalJSON reads "each" or an array of node ids (another value is
// a *json.UnmarshalTypeError, which the decoder names "nodes").
func (n *BenchNodes) UnmarshalJSON(b []byte) error {
	bad := &json.UnmarshalTypeError{Value: `"each" or an array of node ids`, Type: reflect.TypeFor[BenchNodes]()}
	var s string
	if json.Unmarshal(b, &s) == nil {
		if s != EachNode {
			return bad
		}
		*n = BenchNodes{Each: true}
		return nil
	}
	var ids []string
	if json.Unmarshal(b, &ids) != nil {
		return bad
	}
	*n = BenchNodes{IDs: ids}
	return nil
}

// MarshalJSON writes "each" or the ids.
func (n BenchNodes) MarshalJSON() ([]byte, error) {
	if n.Each {
		return json.Marshal(EachNode)
	}
	return json.Marshal(n.IDs)
}

// AccuracyRequest is the body of POST /admin/api/bench/accuracy.
type AccuracyRequest struct {
	Model string `json:"model"`
	// Text is scored (default a bundled English text); Window is the
	// context of each scored window in tokens (default the whole text).
	Text   string `json:"text,omitempty"`
	Window int    `json:"window,omitempty"`
	// Compare is another model scored on the same text in the same job:
	// by default the model's float original when oQ recorded it and it
	// is on the node (see Compare).
	Compare Compare `json:"compare,omitzero"`
	Node    string  `json:"node,omitempty"`
	// Nodes runs the job on several nodes instead, as for BenchRunRequest.
	Nodes *BenchNodes `json:"nodes,omitempty"`
	// MultipleChoice is how many questions of the generated
	// multiple-choice set to score the model (and compare) on besides
	// the perplexity (0: none).
	MultipleChoice int `json:"multiple_choice,omitempty"`
	// Questions are a multiple-choice test the request carries (MMLU's,
	// say), scored in lm-eval's MMLU form (quant.Question.Choice).
	Questions []quant.Question `json:"questions,omitempty"`
	// QuestionCount and QuestionsSHA256 stand for Questions in a job's
	// record (see Record); a request cannot give them.
	QuestionCount   int    `json:"question_count,omitempty"`
	QuestionsSHA256 string `json:"questions_sha256,omitempty"`
}

// Record is the request as a job records it: without its text and
// questions, which may be megabytes, but with the number of questions
// and the first 16 hex digits of the sha256 of their JSON
// (QuestionsDigest).
func (q AccuracyRequest) Record() AccuracyRequest {
	if len(q.Questions) > 0 {
		q.QuestionCount, q.QuestionsSHA256 = len(q.Questions), QuestionsDigest(q.Questions)
	}
	q.Text, q.Questions = "", nil
	return q
}

// QuestionsDigest is the first 16 hex digits of the sha256 of qs as JSON
// (encoding/json's encoding of the array): a set's name in records and
// results.
func QuestionsDigest(qs []quant.Question) string {
	b, err := json.Marshal(qs)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
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
	MaxBenchPoints    = 8      // prompt lengths, concurrency levels, and generation lengths (each)
	MaxBenchNodes     = 64     // node ids in "nodes"
	MaxBenchPrompt    = 32768  // tokens (default of BenchLimits.MaxPrompt)
	MaxBenchGenerate  = 4096   // tokens (default of BenchLimits.MaxGenerate)
	MaxBenchStreams   = 64     // concurrency (default of BenchLimits.MaxStreams)
	MaxAccuracyText   = 200000 // bytes
	MaxAccuracyWindow = 8192   // tokens
	MaxAccuracyChoice = 1000   // multiple-choice questions

	// MaxBenchGrid bounds the points of one request (prompt lengths ×
	// concurrency levels × generation lengths; default of
	// BenchLimits.MaxPoints): the largest grid's result fits a job's
	// result (jobs.DefaultMaxResultBytes) and a profile
	// (fsm.MaxProfileBytes), as node's TestBenchGridFits checks.
	MaxBenchGrid = 32

	// MaxAccuracyQuestions and MaxAccuracyQuestionBytes are the defaults
	// of BenchLimits.MaxQuestions and MaxQuestionBytes: MMLU's whole test
	// set (14,042 questions, 6.5 MB of text) fits.
	MaxAccuracyQuestions     = 16384
	MaxAccuracyQuestionBytes = 8 << 20
	// MaxAccuracyTopics bounds the distinct topics of bench/accuracy's
	// questions (MMLU has 57): a result counts questions per topic, for
	// the model and for compare, and the most topics at their longest
	// (quant.MaxTopicBytes) fit a job's result and a profile, as node's
	// TestAccuracyTopicsFit checks.
	MaxAccuracyTopics = 64
)

// BenchLimits bound the work one benchmark request may ask for; a zero
// field is its constant's default (MaxBenchPrompt, MaxBenchGenerate,
// MaxBenchStreams, MaxBenchGrid, MaxAccuracyQuestions, MaxAccuracyQuestionBytes).
type BenchLimits struct {
	MaxPrompt   int // tokens of one prompt
	MaxGenerate int // tokens generated per stream
	MaxStreams  int // streams at once
	MaxPoints   int // points of the grid
	// MaxQuestions bounds bench/accuracy's questions, MaxQuestionBytes
	// their texts' bytes (questions, options and topics).
	MaxQuestions     int
	MaxQuestionBytes int
}

// accuracyBody is the most bytes a bench/accuracy body may have: room
// for a text and for the questions' texts twice over (JSON escapes) with
// 256 bytes of keys and punctuation each; a longer body is a 413.
func (l BenchLimits) accuracyBody() int64 {
	return maxBenchBody + 2*int64(l.MaxQuestionBytes) + 256*int64(l.MaxQuestions)
}

func (l BenchLimits) orDefaults() BenchLimits {
	if l.MaxPrompt <= 0 {
		l.MaxPrompt = MaxBenchPrompt
	}
	if l.MaxGenerate <= 0 {
		l.MaxGenerate = MaxBenchGenerate
	}
	if l.MaxStreams <= 0 {
		l.MaxStreams = MaxBenchStreams
	}
	if l.MaxPoints <= 0 {
		l.MaxPoints = MaxBenchGrid
	}
	if l.MaxQuestions <= 0 {
		l.MaxQuestions = MaxAccuracyQuestions
	}
	if l.MaxQuestionBytes <= 0 {
		l.MaxQuestionBytes = MaxAccuracyQuestionBytes
	}
	return l
}

func (h *Handler) mountBench(r chi.Router) {
	if h.cfg.Bench == nil || h.cfg.Jobs == nil {
		return
	}
	r.Post("/admin/api/bench/run", h.benchRun)
	r.Post("/admin/api/bench/accuracy", h.benchAccuracy)
	r.Get("/admin/api/profiles", h.profiles)
	// A model id may hold a slash (a Hugging Face cache's ORG/NAME),
	// plain or escaped.
	r.Get("/admin/api/profiles/*", h.profiles)
}

func (h *Handler) profiles(w http.ResponseWriter, r *http.Request) {
	model := chi.URLParam(r, "*")
	if u, err := url.PathUnescape(model); err == nil {
		model = u
	}
	list := h.cfg.Bench.Profiles(model)
	if list == nil {
		list = []Profile{}
	}
	openai.WriteJSON(w, http.StatusOK, ProfileList{Object: "list", Data: list})
}

func (h *Handler) benchRun(w http.ResponseWriter, r *http.Request) {
	req, ok := jobRequest(h, w, r, maxBenchBody, checkBenchRun(h.cfg.BenchLimits.orDefaults()), "model", "prompt_lengths", "concurrency", "generation_lengths", "generation_length", "node", "nodes")
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), startWait)
	defer cancel()
	if req.Nodes != nil {
		child := req
		child.Nodes = nil
		h.benchEach(ctx, w, "benchmark", "bench", "/admin/api/bench/run", req.Model, req.Nodes, req, func(node string) any {
			child.Node = node
			return child
		}, func(ctx context.Context) (jobs.Job, error) {
			c := child
			c.Node = ""
			return h.cfg.Bench.Run(ctx, c)
		})
		return
	}
	j, err := h.cfg.Bench.Run(ctx, req)
	if !writeBenchRefusal(w, err) {
		writeJobStarted(w, "benchmark", j, err)
	}
}

func (h *Handler) benchAccuracy(w http.ResponseWriter, r *http.Request) {
	l := h.cfg.BenchLimits.orDefaults()
	req, ok := jobRequest(h, w, r, l.accuracyBody(), func(req AccuracyRequest) *openai.Error { return checkAccuracy(l, req) },
		"model", "text", "window", "compare", "node", "multiple_choice", "questions", "nodes")
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), startWait)
	defer cancel()
	if req.Nodes != nil {
		child := req
		child.Nodes = nil
		h.benchEach(ctx, w, "accuracy benchmark", "accuracy", "/admin/api/bench/accuracy", req.Model, req.Nodes, req.Record(), func(node string) any {
			child.Node = node
			return child
		}, func(ctx context.Context) (jobs.Job, error) {
			c := child
			c.Node = ""
			return h.cfg.Bench.Accuracy(ctx, c)
		})
		return
	}
	j, err := h.cfg.Bench.Accuracy(ctx, req)
	if !writeBenchRefusal(w, err) {
		writeJobStarted(w, "accuracy benchmark", j, err)
	}
}

func checkAccuracy(l BenchLimits, req AccuracyRequest) *openai.Error {
	switch {
	case req.Model == "":
		return openai.MissingParam("model")
	case !modelID(req.Model):
		return openai.InvalidRequest("model", "model must be a model id the node lists (a name, or ORG/NAME).")
	case req.Compare.Name != "" && !modelID(req.Compare.Name):
		return openai.InvalidRequest("compare", "compare must be a model id the node lists (a name, or ORG/NAME).")
	case len(req.Text) > MaxAccuracyText:
		return openai.InvalidRequest("text", "text is at most %d bytes.", MaxAccuracyText)
	case req.Window < 0 || req.Window == 1 || req.Window > MaxAccuracyWindow:
		return openai.InvalidRequest("window", "window is 2 to %d tokens (0: the whole text).", MaxAccuracyWindow)
	case req.MultipleChoice < 0 || req.MultipleChoice > MaxAccuracyChoice:
		return openai.InvalidRequest("multiple_choice", "multiple_choice is 0 to %d questions.", MaxAccuracyChoice)
	case len(req.Questions) > l.MaxQuestions:
		return openai.InvalidRequest("questions", "questions holds at most %d questions, not %d.", l.MaxQuestions, len(req.Questions))
	}
	size := 0
	topics := map[string]bool{}
	for i, q := range req.Questions {
		if msg := q.Check(); msg != "" {
			return openai.InvalidRequest(fmt.Sprintf("questions[%d]", i), "questions[%d]: %s.", i, msg)
		}
		if size += q.Bytes(); size > l.MaxQuestionBytes {
			return openai.InvalidRequest("questions", "The questions' texts (questions, options and topics) are at most %d bytes.", l.MaxQuestionBytes)
		}
		if topics[q.Topic] = true; len(topics) > MaxAccuracyTopics {
			return openai.InvalidRequest(fmt.Sprintf("questions[%d]", i), "questions[%d]: the questions have at most %d topics.", i, MaxAccuracyTopics)
		}
	}
	return checkNodes(req.Node, req.Nodes)
}

// BenchRequestError is a benchmark request the node refuses once it
// knows the model (a prompt beyond its context, say): a 400 on Param.
type BenchRequestError struct {
	Param   string
	Message string
}

func (e *BenchRequestError) Error() string { return e.Message }

// writeBenchRefusal answers ErrNoModel with a 404, a *BenchRequestError
// with a 400, and another node's refusal of a child job with its own
// answer.
func writeBenchRefusal(w http.ResponseWriter, err error) bool {
	var bad *BenchRequestError
	var refused *RefusedError
	switch {
	case errors.Is(err, ErrNoModel):
		openai.WriteError(w, &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Param: "model", Code: "model_not_found", Message: err.Error()})
	case errors.As(err, &bad):
		openai.WriteError(w, openai.InvalidRequest(bad.Param, "%s", bad.Message))
	case errors.As(err, &refused) && refused.Status >= 400 && refused.Status < 500:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(refused.Status)
		_, _ = w.Write(refused.Body)
	default:
		return false
	}
	return true
}

// checkBenchRun checks a bench/run body within l.
func checkBenchRun(l BenchLimits) func(BenchRunRequest) *openai.Error {
	return func(req BenchRunRequest) *openai.Error { return checkBenchRunIn(l, req) }
}

func checkBenchRunIn(l BenchLimits, req BenchRunRequest) *openai.Error {
	if req.Model == "" {
		return openai.MissingParam("model")
	}
	if len(req.PromptLengths) > MaxBenchPoints || len(req.Concurrency) > MaxBenchPoints {
		return openai.InvalidRequest("prompt_lengths", "At most %d prompt lengths and %d concurrency levels.", MaxBenchPoints, MaxBenchPoints)
	}
	if len(req.GenerationLengths) > MaxBenchPoints {
		return openai.InvalidRequest("generation_lengths", "At most %d generation lengths.", MaxBenchPoints)
	}
	if req.GenerationLength != 0 && len(req.GenerationLengths) > 0 {
		return openai.InvalidRequest("generation_length", "Give generation_lengths or generation_length, not both.")
	}
	for i, n := range req.GenerationLengths {
		if n < 1 || n > l.MaxGenerate {
			return openai.InvalidRequest(fmt.Sprintf("generation_lengths[%d]", i), "A generation length is 1 to %d tokens.", l.MaxGenerate)
		}
	}
	if e := checkNodes(req.Node, req.Nodes); e != nil {
		return e
	}
	for i, n := range req.PromptLengths {
		if n < 1 || n > l.MaxPrompt {
			return openai.InvalidRequest(fmt.Sprintf("prompt_lengths[%d]", i), "A prompt length is 1 to %d tokens.", l.MaxPrompt)
		}
	}
	for i, n := range req.Concurrency {
		if n < 1 || n > l.MaxStreams {
			return openai.InvalidRequest(fmt.Sprintf("concurrency[%d]", i), "A concurrency level is 1 to %d streams.", l.MaxStreams)
		}
	}
	if req.GenerationLength < 0 || req.GenerationLength > l.MaxGenerate {
		return openai.InvalidRequest("generation_length", "generation_length is 1 to %d tokens.", l.MaxGenerate)
	}
	if n := BenchPoints(req); n > l.MaxPoints {
		return openai.InvalidRequest("prompt_lengths", "%d points (prompt lengths × concurrency levels × generation lengths) is over the limit of %d points a request.", n, l.MaxPoints)
	}
	return nil
}

// BenchPoints is how many points req asks for: prompt lengths ×
// concurrency levels × generation lengths, each at least its default's
// one.
func BenchPoints(req BenchRunRequest) int {
	return max(1, len(req.PromptLengths)) * max(1, len(req.Concurrency)) * max(1, len(req.Generations()))
}

// checkNodes checks a benchmark request's "nodes" beside its "node".
func checkNodes(node string, nodes *BenchNodes) *openai.Error {
	if nodes == nil {
		return nil
	}
	if node != "" {
		return openai.InvalidRequest("nodes", "Give node or nodes, not both.")
	}
	if !nodes.Each && (len(nodes.IDs) == 0 || len(nodes.IDs) > MaxBenchNodes) {
		return openai.InvalidRequest("nodes", "nodes is %q or 1 to %d node ids.", EachNode, MaxBenchNodes)
	}
	for i, id := range nodes.IDs {
		if id == "" || len(id) > 256 || slices.Index(nodes.IDs, id) != i {
			return openai.InvalidRequest(fmt.Sprintf("nodes[%d]", i), "A node is a node id, named once.")
		}
	}
	return nil
}
