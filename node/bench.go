package node

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"fusion/cluster"
	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
	"fusion/engine"
	"fusion/engine/quant"
	"fusion/engine/runner"
	"fusion/engine/sample"
	"fusion/jobs"
	"fusion/router/admin"
	"fusion/store"
)

// Profile kinds.
const (
	ProfileThroughput = cluster.ProfileThroughput // the planner reads these
	ProfileAccuracy   = "accuracy"
)

// Benchmark defaults.
const (
	defaultBenchPrompt   = 128
	defaultBenchGenerate = 32
	warmupPrompt         = 8 // tokens of the warm-up generation's prompt
)

// ThroughputPoint is one (prompt length, concurrency, generation
// length) measurement.
type ThroughputPoint struct {
	PromptTokens int `json:"prompt_tokens"` // asked per stream
	Concurrency  int `json:"concurrency"`
	// GenerationLength is the tokens asked per stream.
	GenerationLength int `json:"generation_length"`
	// Generated is the tokens the streams produced in all (a stream ends
	// early at an end-of-sequence token).
	Generated int `json:"generated_tokens"`
	// TTFT is the time for every stream to get its first token (the
	// prefill run's wall time); PrefillTokS the prompt tokens of all
	// streams over it; DecodeTokS the tokens after each stream's first
	// over the time the full run took beyond the prefill run (aggregate).
	TTFTSeconds float64 `json:"ttft_seconds"`
	PrefillTokS float64 `json:"prefill_tok_s"`
	DecodeTokS  float64 `json:"decode_tok_s"`
	Seconds     float64 `json:"seconds"`
	// PeakMemoryBytes is the engine's memory by the runner's accounting
	// at its highest during the point: the weights of the models loaded
	// on the node plus PeakKVBytes, the KV cache high-water mark of its
	// running generations (node-wide, so other requests running meanwhile
	// count; activations and scratch buffers do not).
	PeakMemoryBytes int64 `json:"peak_memory_bytes"`
	PeakKVBytes     int64 `json:"peak_kv_bytes"`
	// MLXPeakMemoryBytes, when the model runs on MLX, is MLX's allocator
	// peak over the point (reset at its start; process-wide, so whatever
	// else runs on MLX meanwhile counts).
	MLXPeakMemoryBytes int64 `json:"mlx_peak_memory_bytes,omitempty"`
}

// ThroughputResult is a throughput job's result and profile.
type ThroughputResult struct {
	Model string `json:"model"`
	Node  string `json:"node"`
	// GenerationLengths are the generation lengths asked;
	// GenerationLength the first of them (as results before there were
	// several said).
	GenerationLengths []int             `json:"generation_lengths"`
	GenerationLength  int               `json:"generation_length"`
	Points            []ThroughputPoint `json:"points"`
}

// AccuracyResult is an accuracy job's result and profile.
type AccuracyResult struct {
	Model   string       `json:"model"`
	Node    string       `json:"node"`
	Text    string       `json:"text"` // "bundled" or "request"
	Score   quant.Score  `json:"score"`
	Compare string       `json:"compare,omitempty"`
	Against *quant.Score `json:"compare_score,omitempty"`
	// PerplexityDelta is the model's perplexity minus compare's.
	PerplexityDelta *float64 `json:"perplexity_delta,omitempty"`
	// MultipleChoice is the model's score on the request's number of
	// questions of the generated set (quant.ArithmeticChoices),
	// CompareChoice compare's on the same questions.
	MultipleChoice *quant.ChoiceScore `json:"multiple_choice,omitempty"`
	CompareChoice  *quant.ChoiceScore `json:"compare_multiple_choice,omitempty"`
	// CompareFound: compare was not named but is the model's float
	// original, which oQ recorded in its config and this node holds.
	CompareFound bool `json:"compare_found,omitempty"`
	// MultipleChoiceDelta is the model's multiple-choice accuracy minus
	// compare's.
	MultipleChoiceDelta *float64 `json:"multiple_choice_delta,omitempty"`
	// Questions is the model's score on the request's questions (in
	// lm-eval's MMLU form, with counts per topic), QuestionsSHA256 the
	// set's digest (admin.QuestionsDigest), CompareQuestions compare's
	// score on them and QuestionsDelta the model's accuracy minus
	// compare's.
	Questions        *quant.ChoiceScore `json:"questions,omitempty"`
	QuestionsSHA256  string             `json:"questions_sha256,omitempty"`
	CompareQuestions *quant.ChoiceScore `json:"compare_questions,omitempty"`
	QuestionsDelta   *float64           `json:"questions_delta,omitempty"`
}

// nodeBench serves the benchmark and profile routes.
type nodeBench struct{ n *Node }

func (b nodeBench) model(ctx context.Context, id string) (engine.ModelInfo, error) {
	models, err := b.n.runner.Models(ctx)
	if err != nil {
		return engine.ModelInfo{}, err
	}
	for _, m := range models {
		if m.ID == id {
			return m, nil
		}
	}
	return engine.ModelInfo{}, fmt.Errorf("%w: %q", admin.ErrNoModel, id)
}

// Run starts a throughput job: for each prompt length, concurrency and
// generation length, that many streams of greedy generation at once
// through this node's engine, each prompt distinct (no prefix-cache
// hits). A prompt length the model's context cannot hold is refused
// before the job (*admin.BenchRequestError).
func (b nodeBench) Run(ctx context.Context, req admin.BenchRunRequest) (jobs.Job, error) {
	n := b.n
	if _, err := b.model(ctx, req.Model); err != nil {
		return jobs.Job{}, err
	}
	req.Node, req.Nodes = n.jobs.Node(), nil
	if len(req.PromptLengths) == 0 {
		req.PromptLengths = []int{defaultBenchPrompt}
	}
	if len(req.Concurrency) == 0 {
		req.Concurrency = []int{1}
	}
	req.GenerationLengths, req.GenerationLength = req.Generations(), 0
	if len(req.GenerationLengths) == 0 {
		req.GenerationLengths = []int{defaultBenchGenerate}
	}
	if err := b.checkContext(req); err != nil {
		return jobs.Job{}, err
	}
	return n.jobs.Submit(ctx, "bench", req, func(ctx context.Context, r *jobs.Reporter) (any, error) {
		total := len(req.PromptLengths) * len(req.Concurrency) * len(req.GenerationLengths)
		r.SetTotal("steps", int64(total))
		res := ThroughputResult{Model: req.Model, Node: req.Node, GenerationLengths: req.GenerationLengths, GenerationLength: req.GenerationLengths[0]}
		// A warm-up first (the model's load, the first steps' one-time
		// costs), so the first point's prefill run does not take them:
		// runs 0 to 2·total-1 are the points', 2·total the warm-up's.
		if _, _, _, err := b.streams(ctx, req.Model, min(req.PromptLengths[0], warmupPrompt), 1, 2, 2*total); err != nil {
			r.Logf("warm-up failed: %v", err)
			return nil, err
		}
		run := 0
		for _, p := range req.PromptLengths {
			for _, c := range req.Concurrency {
				for _, g := range req.GenerationLengths {
					if ctx.Err() != nil {
						return nil, context.Cause(ctx)
					}
					pt, err := b.point(ctx, req.Model, p, c, g, run)
					if err != nil {
						r.Logf("failed at prompt %d, concurrency %d, generation %d: %v", p, c, g, err)
						return nil, err
					}
					res.Points = append(res.Points, pt)
					run++
					r.SetDone(int64(run))
					r.Logf("prompt %d × %d, generating %d: prefill %.1f tok/s, decode %.1f tok/s, ttft %.3fs, peak memory %d bytes", p, c, g, pt.PrefillTokS, pt.DecodeTokS, pt.TTFTSeconds, pt.PeakMemoryBytes)
				}
			}
		}
		if err := b.putProfile(ctx, req.Model, ProfileThroughput, r, res); err != nil {
			return nil, err
		}
		return res, nil
	})
}

// checkContext refuses a prompt length the model's context cannot hold
// with a token to generate (the runner refuses such prompts).
func (b nodeBench) checkContext(req admin.BenchRunRequest) error {
	ctxLen := 0
	for _, d := range b.n.runner.Details() {
		if d.ID == req.Model {
			ctxLen = d.ContextLength
		}
	}
	if ctxLen <= 0 {
		return nil // unknown: the runner judges each prompt
	}
	for i, p := range req.PromptLengths {
		if p >= ctxLen {
			return &admin.BenchRequestError{Param: fmt.Sprintf("prompt_lengths[%d]", i),
				Message: fmt.Sprintf("A prompt of %d tokens does not fit %s's context of %d tokens.", p, req.Model, ctxLen)}
		}
	}
	return nil
}

// point measures c streams of a prompt of p tokens in two runs, each
// with prompts of its own (no prefix-cache hits): one generating a single
// token (prefill: its wall time gives TTFT and prefill tokens/s), one
// generating up to gen tokens; decode tokens/s is the second run's tokens
// after each stream's first over the difference of the two wall times.
// Wall times, not event arrival times: a busy reader may receive a
// stream's tokens late and all at once. Only when the two wall times
// say nothing (a short generation on a loaded machine: the second run
// no longer than the first) is decode timed from the second run's last
// first token to its end.
func (b nodeBench) point(ctx context.Context, model string, p, c, gen, run int) (ThroughputPoint, error) {
	pt := ThroughputPoint{PromptTokens: p, Concurrency: c, GenerationLength: gen}
	stop := b.n.runner.WatchKV()
	defer stop()
	mlxPeak := b.onMLX(model) && b.n.runner.ResetMLXPeak(ctx) == nil
	pre, prefillTime, _, err := b.streams(ctx, model, p, c, 1, 2*run)
	if err != nil {
		return pt, err
	}
	weights := b.n.runner.Stats().WeightBytes // the model is loaded by now
	full, fullTime, firstBy, err := b.streams(ctx, model, p, c, gen, 2*run+1)
	if err != nil {
		return pt, err
	}
	pt.PeakKVBytes = stop()
	pt.PeakMemoryBytes = max(weights, b.n.runner.Stats().WeightBytes) + pt.PeakKVBytes
	if mlxPeak {
		m, err := b.n.runner.MLXMemory(ctx)
		if err != nil {
			return pt, fmt.Errorf("reading MLX's peak memory: %w", err)
		}
		pt.MLXPeakMemoryBytes = m.Peak
	}
	pt.Seconds = (prefillTime + fullTime).Seconds()
	pt.TTFTSeconds = prefillTime.Seconds()
	if d := prefillTime.Seconds(); d > 0 {
		pt.PrefillTokS = float64(pre.PromptTokens) / d
	}
	pt.Generated = full.CompletionTokens
	decoded := full.CompletionTokens - c
	d := fullTime - prefillTime
	if d <= 0 {
		d = fullTime - firstBy
	}
	if d > 0 && decoded > 0 {
		pt.DecodeTokS = float64(decoded) / d.Seconds()
	}
	return pt, nil
}

// onMLX reports whether model is loaded on the MLX backend.
func (b nodeBench) onMLX(model string) bool {
	for _, m := range b.n.runner.List() {
		if m.ID == model {
			return m.Backend == runner.BackendMLX
		}
	}
	return false
}

// streams runs c greedy generations of a p-token prompt at once, each up
// to gen tokens, and returns their summed usage, the wall time until the
// last ended, and the time until the last stream's first token arrived.
func (b nodeBench) streams(ctx context.Context, model string, p, c, gen, run int) (engine.Usage, time.Duration, time.Duration, error) {
	usages := make([]engine.Usage, c)
	errs := make([]error, c)
	firsts := make([]time.Duration, c)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prompt := make([]int, p)
			for k := range prompt {
				// Distinct from the first token on, so no stream or run
				// reuses another's cached prefix.
				prompt[k] = 3 + (run*131+i*17+k*7+k*k)%250
			}
			sp := sample.DefaultParams()
			sp.Temperature = 0
			events, err := b.n.runner.Generate(ctx, &engine.Request{Model: model, PromptTokens: prompt, MaxTokens: gen,
				Sampling: sp, Priority: engine.PriorityBackground})
			if err != nil {
				errs[i] = err
				return
			}
			for ev := range events {
				if firsts[i] == 0 && (ev.Usage.CompletionTokens > 0 || ev.Done) {
					firsts[i] = time.Since(start)
				}
				if ev.Err != nil {
					errs[i] = ev.Err
				}
				if ev.Done {
					usages[i] = ev.Usage
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	// A generation cut short by ctx may end without an error: its
	// figures mean nothing.
	if ctx.Err() != nil {
		return engine.Usage{}, took, 0, context.Cause(ctx)
	}
	var sum engine.Usage
	var firstBy time.Duration
	for i, u := range usages {
		if errs[i] != nil {
			return sum, took, firstBy, errs[i]
		}
		sum.PromptTokens += u.PromptTokens
		sum.CompletionTokens += u.CompletionTokens
		firstBy = max(firstBy, firsts[i])
	}
	return sum, took, firstBy, nil
}

// Accuracy starts a job scoring the model's perplexity on a text and,
// when asked, its accuracy on generated multiple-choice questions and on
// the request's own (and compare's on the same), on the CPU backend from
// its files.
func (b nodeBench) Accuracy(ctx context.Context, req admin.AccuracyRequest) (jobs.Job, error) {
	n := b.n
	m, err := b.model(ctx, req.Model)
	if err != nil {
		return jobs.Job{}, err
	}
	var cmp engine.ModelInfo
	found := false
	switch {
	case req.Compare.Name != "":
		if cmp, err = b.model(ctx, req.Compare.Name); err != nil {
			return jobs.Job{}, err
		}
	case !req.Compare.Off:
		cmp, found = b.recordedSource(ctx, m)
	}
	compare := cmp.ID
	req.Node, req.Nodes = n.jobs.Node(), nil
	text, source := req.Text, "request"
	if text == "" {
		text, source = quant.EvalText, "bundled"
	}
	params := req.Record()
	set := make([]quant.Choice, len(req.Questions))
	for i, q := range req.Questions {
		set[i] = q.Choice()
	}
	return n.jobs.Submit(ctx, "accuracy", params, func(ctx context.Context, r *jobs.Reporter) (any, error) {
		models := []engine.ModelInfo{m}
		if compare != "" {
			models = append(models, cmp)
		}
		// A step per model's perplexity and per question it answers.
		perModel := int64(1 + req.MultipleChoice + len(set))
		r.SetTotal("steps", perModel*int64(len(models)))
		qs := quant.ArithmeticChoices(req.MultipleChoice)
		scores := make([]quant.Score, len(models))
		choices := make([]*quant.ChoiceScore, len(models))
		sets := make([]*quant.ChoiceScore, len(models))
		for i, mi := range models {
			base := int64(i) * perModel
			s, err := quant.Perplexity(ctx, mi.Path, text, req.Window)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", mi.ID, err)
			}
			scores[i] = s
			r.SetDone(base + 1)
			r.Logf("%s: perplexity %.4g over %d tokens", mi.ID, s.Perplexity, s.Tokens)
			if len(qs) > 0 {
				c, err := quant.MultipleChoice(ctx, mi.Path, qs, func(done int) { r.SetDone(base + 1 + int64(done)) })
				if err != nil {
					return nil, fmt.Errorf("%s: %w", mi.ID, err)
				}
				choices[i] = &c
				r.Logf("%s: %d of %d multiple-choice questions right", mi.ID, c.Correct, c.Questions)
			}
			if len(set) > 0 {
				base += int64(1 + len(qs))
				c, err := quant.MultipleChoice(ctx, mi.Path, set, func(done int) { r.SetDone(base + int64(done)) })
				if err != nil {
					return nil, fmt.Errorf("%s: the questions: %w", mi.ID, err)
				}
				sets[i] = &c
				r.Logf("%s: %d of %d of the request's questions right (%s)", mi.ID, c.Correct, c.Questions, params.QuestionsSHA256)
			}
		}
		res := AccuracyResult{Model: req.Model, Node: req.Node, Text: source, Score: scores[0], MultipleChoice: choices[0],
			Questions: sets[0], QuestionsSHA256: params.QuestionsSHA256}
		if compare != "" {
			d := scores[0].Perplexity - scores[1].Perplexity
			res.Compare, res.Against, res.PerplexityDelta, res.CompareChoice = compare, &scores[1], &d, choices[1]
			res.CompareFound = found
			if choices[0] != nil {
				cd := choices[0].Accuracy - choices[1].Accuracy
				res.MultipleChoiceDelta = &cd
			}
			if sets[0] != nil {
				qd := sets[0].Accuracy - sets[1].Accuracy
				res.CompareQuestions, res.QuestionsDelta = sets[1], &qd
			}
		}
		if err := b.putProfile(ctx, req.Model, ProfileAccuracy, r, res); err != nil {
			return nil, err
		}
		return res, nil
	})
}

// recordedSource is the float model m was quantized from when oQ
// recorded it in m's config and this node holds that very model (its
// config and weight headers hash as recorded); false otherwise.
func (b nodeBench) recordedSource(ctx context.Context, m engine.ModelInfo) (engine.ModelInfo, bool) {
	s, ok, err := quant.RecordedSource(m.Path)
	if err != nil || !ok {
		return engine.ModelInfo{}, false
	}
	src, err := b.model(ctx, s.Model)
	if err != nil || !s.Matches(src.Path) {
		slog.Debug("accuracy: the recorded source is not here", "model", m.ID, "source", s.Model, "err", err)
		return engine.ModelInfo{}, false
	}
	return src, true
}

// putProfile records a job's result as the model's profile of kind on
// this node.
func (b nodeBench) putProfile(ctx context.Context, model, kind string, r *jobs.Reporter, res any) error {
	raw, err := json.Marshal(res)
	if err != nil {
		return err
	}
	p := admin.Profile{Model: model, Node: b.n.jobs.Node(), Kind: kind, JobID: r.JobID(), Updated: time.Now(), Result: raw}
	if b.n.member == nil {
		return b.n.profiles.put(p)
	}
	_, err = b.n.member.Apply(ctx, &pb.ProfilePut{Profile: &pb.Profile{Model: p.Model, Node: p.Node, Kind: p.Kind, JobId: p.JobID,
		UpdatedUnixNano: p.Updated.UnixNano(), Result: raw}})
	if err != nil {
		return fmt.Errorf("recording the profile: %w", err)
	}
	return nil
}

// Profiles implements admin.Bench.
func (b nodeBench) Profiles(model string) []admin.Profile {
	if b.n.member == nil {
		return b.n.profiles.list(model)
	}
	var list []*pb.Profile
	b.n.member.FSM().Read(func(st *fsm.State) { list = st.Profiles(model) })
	out := make([]admin.Profile, len(list))
	for i, p := range list {
		out[i] = admin.Profile{Model: p.Model, Node: p.Node, Kind: p.Kind, JobID: p.JobId, Updated: time.Unix(0, p.UpdatedUnixNano), Result: p.Result}
	}
	return out
}

// soloProfiles keeps a lone node's profiles: in node.db, so they
// survive a restart (in memory only without a data dir); a cluster keeps
// them in its Raft state.
type soloProfiles struct {
	mu sync.Mutex
	m  map[string]admin.Profile
	db *store.NodeDB
}

// open loads the profiles db holds and writes later ones to it.
func (s *soloProfiles) open(db *store.NodeDB) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.db = db
	if db == nil {
		return nil
	}
	all, err := db.All(bucketProfiles)
	if err != nil {
		return fmt.Errorf("node: profiles: %w", err)
	}
	if s.m == nil {
		s.m = map[string]admin.Profile{}
	}
	for k, raw := range all {
		var p admin.Profile
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("node: profile %q: %w", k, err)
		}
		s.m[k] = p
	}
	return nil
}

func (s *soloProfiles) put(p admin.Profile) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := p.Model + "\x00" + p.Kind
	if s.db != nil {
		raw, err := json.Marshal(p)
		if err != nil {
			return err
		}
		if err := s.db.Put(bucketProfiles, key, raw); err != nil {
			return fmt.Errorf("recording the profile: %w", err)
		}
	}
	if s.m == nil {
		s.m = map[string]admin.Profile{}
	}
	s.m[key] = p
	return nil
}

func (s *soloProfiles) list(model string) []admin.Profile {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []admin.Profile
	for _, p := range s.m {
		if model == "" || p.Model == model {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Model != out[j].Model {
			return out[i].Model < out[j].Model
		}
		return out[i].Kind < out[j].Kind
	})
	return out
}
