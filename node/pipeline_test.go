package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"fusion/cluster"
	"fusion/engine/demo"
	"fusion/engine/demo/demotest"
	"fusion/engine/runner"
	"fusion/engine/safetensors"
	"fusion/node"
	"fusion/node/nodetest"
)

// deepModel is a six-layer demo model, deep enough for three stages.
const deepModel = "deep"

func deepModels(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	o := demo.DefaultOptions()
	o.Layers, o.Seed = 6, 18
	demotest.Create(t, filepath.Join(dir, deepModel), o) // built once per test binary
	return dir
}

// stageBytes is what a stage of [start, end) of the model at dir must
// hold: the bytes of exactly its tensors in the weights file (its layers,
// the embedding on the first stage, the final norm and the head — the
// tied embedding — on the last), matrices as stored (the CPU backend
// uses the mapped file's bytes in place) and vectors in float32.
func stageBytes(t *testing.T, dir string, start, end, layers int) int64 {
	t.Helper()
	f, err := safetensors.Open(filepath.Join(dir, deepModel, "model.safetensors"), safetensors.LoadMmap)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	layer := regexp.MustCompile(`^model\.layers\.(\d+)\.`)
	var n int64
	for _, ts := range f.Tensors() {
		in := false
		if m := layer.FindStringSubmatch(ts.Name); m != nil {
			l, _ := strconv.Atoi(m[1])
			in = l >= start && l < end
		} else {
			switch ts.Name {
			case "model.embed_tokens.weight":
				in = start == 0 || end == layers // the last stage's tied head
			case "model.norm.weight", "lm_head.weight":
				in = end == layers
			default:
				t.Fatalf("unexpected tensor %s", ts.Name)
			}
		}
		switch {
		case !in:
		case len(ts.Shape) == 1:
			n += 4 * ts.Elements() // vectors are widened to float32 as they load
		default:
			n += int64(len(ts.Data))
		}
	}
	return n
}

// answer is everything a client sees of one greedy request, per route.
type answer struct{ openai, openaiStream, anthropic, openclaw string }

func pipePost(url, path, body string) (*http.Response, error) {
	req, _ := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	req.Header.Set("x-api-key", "k")
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}

// greedyAnswers asks url for prompt through OpenAI chat (plain and
// streamed, with logprobs), Anthropic messages and an OpenClaw agent turn
// (a new session's first turn). It returns an error rather than failing,
// so it may run on other goroutines.
func greedyAnswers(url, prompt string) (answer, string, error) {
	var a answer
	msgs := fmt.Sprintf(`[{"role":"user","content":%q}]`, prompt)
	resp, err := pipePost(url, "/v1/chat/completions", `{"model":"deep","messages":`+msgs+`,"max_tokens":8,"temperature":0,"logprobs":true,"top_logprobs":3}`)
	if err != nil {
		return a, "", err
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	servedBy := resp.Header.Get("X-Fusion-Node")
	if resp.StatusCode != 200 {
		return a, servedBy, fmt.Errorf("openai: %d %s", resp.StatusCode, raw)
	}
	var out struct {
		Choices []struct {
			Message  json.RawMessage `json:"message"`
			Logprobs json.RawMessage `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Choices) != 1 {
		return a, servedBy, fmt.Errorf("openai: %v %s", err, raw)
	}
	a.openai = string(out.Choices[0].Message) + string(out.Choices[0].Logprobs)

	resp, err = pipePost(url, "/v1/chat/completions", `{"model":"deep","messages":`+msgs+`,"max_tokens":8,"temperature":0,"logprobs":true,"top_logprobs":3,"stream":true}`)
	if err != nil {
		return a, servedBy, err
	}
	if resp.StatusCode != 200 {
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return a, servedBy, fmt.Errorf("openai stream: %d %s", resp.StatusCode, raw)
	}
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta        json.RawMessage `json:"delta"`
				Logprobs     json.RawMessage `json:"logprobs"`
				FinishReason *string         `json:"finish_reason"`
			} `json:"choices"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			resp.Body.Close()
			return a, servedBy, fmt.Errorf("openai stream chunk %q: %v", data, err)
		}
		if chunk.Error != nil {
			resp.Body.Close()
			return a, servedBy, fmt.Errorf("openai stream error: %s", chunk.Error)
		}
		for _, c := range chunk.Choices {
			b.Write(c.Delta)
			b.Write(c.Logprobs)
			if c.FinishReason != nil {
				b.WriteString(*c.FinishReason)
			}
		}
	}
	resp.Body.Close()
	a.openaiStream = b.String()

	resp, err = pipePost(url, "/v1/messages", `{"model":"deep","messages":`+msgs+`,"max_tokens":8,"temperature":0}`)
	if err != nil {
		return a, servedBy, err
	}
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return a, servedBy, fmt.Errorf("anthropic: %d %s", resp.StatusCode, raw)
	}
	var msg struct {
		Content    json.RawMessage `json:"content"`
		StopReason string          `json:"stop_reason"`
		Usage      struct {
			OutputTokens int `json:"output_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &msg); err != nil {
		return a, servedBy, err
	}
	a.anthropic = fmt.Sprintf("%s %s %d", msg.Content, msg.StopReason, msg.Usage.OutputTokens)

	resp, err = pipePost(url, "/v1/openclaw/agent/sessions", `{"model":"deep","system_prompt":"Be brief."}`)
	if err != nil {
		return a, servedBy, err
	}
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var session struct {
		SessionID string `json:"session_id"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(raw, &session) != nil || session.SessionID == "" {
		return a, servedBy, fmt.Errorf("openclaw session: %d %s", resp.StatusCode, raw)
	}
	resp, err = pipePost(url, "/v1/openclaw/agent/turns?session_id="+session.SessionID, `{"messages":`+msgs+`,"max_tokens":8,"temperature":0}`)
	if err != nil {
		return a, servedBy, err
	}
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return a, servedBy, fmt.Errorf("openclaw turn: %d %s", resp.StatusCode, raw)
	}
	var turn struct {
		Content      string          `json:"content"`
		ToolCalls    json.RawMessage `json:"tool_calls"`
		FinishReason string          `json:"finish_reason"`
		Usage        json.RawMessage `json:"usage"`
		Turn         int             `json:"turn"`
	}
	if err := json.Unmarshal(raw, &turn); err != nil {
		return a, servedBy, fmt.Errorf("openclaw turn: %v %s", err, raw)
	}
	a.openclaw = fmt.Sprintf("%q %s %s %s %d", turn.Content, turn.ToolCalls, turn.FinishReason, turn.Usage, turn.Turn)
	return a, servedBy, nil
}

// sampledAnswers asks url for prompt with what the last stage must apply
// as one node would: seeded temperature with nucleus, penalties, logit
// bias and logprobs; a response_format json_schema; a forced tool call
// (grammar masks). It returns the answers' content, tool calls' function,
// logprobs and finish reasons (not their random ids).
func sampledAnswers(url, prompt string) (string, error) {
	msgs := fmt.Sprintf(`[{"role":"user","content":%q}]`, prompt)
	bodies := []string{
		`{"model":"deep","messages":` + msgs + `,"max_tokens":12,"temperature":1.6,"top_p":0.97,"seed":11,"presence_penalty":0.8,` +
			`"frequency_penalty":0.5,"logit_bias":{"30":6,"31":-100},"logprobs":true,"top_logprobs":4}`,
		`{"model":"deep","messages":` + msgs + `,"max_tokens":40,"temperature":1.3,"seed":5,"response_format":{"type":"json_schema",` +
			`"json_schema":{"name":"item","schema":{"type":"object","properties":{"name":{"type":"string","maxLength":10},"n":{"type":"integer"}},` +
			`"required":["name","n"],"additionalProperties":false}}}}`,
		`{"model":"deep","messages":` + msgs + `,"max_tokens":60,"temperature":1.2,"seed":8,"tools":[{"type":"function","function":` +
			`{"name":"lookup","parameters":{"type":"object","properties":{"q":{"type":"string","maxLength":12}},"required":["q"]}}}],` +
			`"tool_choice":{"type":"function","function":{"name":"lookup"}}}`,
	}
	var b strings.Builder
	for i, body := range bodies {
		resp, err := pipePost(url, "/v1/chat/completions", body)
		if err != nil {
			return "", err
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return "", fmt.Errorf("sampled %d: %d %s", i, resp.StatusCode, raw)
		}
		var out struct {
			Choices []struct {
				Message struct {
					Content   *string `json:"content"`
					ToolCalls []struct {
						Function json.RawMessage `json:"function"`
					} `json:"tool_calls"`
				} `json:"message"`
				Logprobs     json.RawMessage `json:"logprobs"`
				FinishReason string          `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(raw, &out); err != nil || len(out.Choices) != 1 {
			return "", fmt.Errorf("sampled %d: %v %s", i, err, raw)
		}
		c := out.Choices[0]
		if i == 2 && (len(c.Message.ToolCalls) == 0 || c.FinishReason != "tool_calls") {
			return "", fmt.Errorf("sampled %d: no forced tool call: %s", i, raw)
		}
		if i == 1 && (c.Message.Content == nil || !json.Valid([]byte(*c.Message.Content))) {
			return "", fmt.Errorf("sampled %d: not JSON: %s", i, raw)
		}
		if c.Message.Content != nil {
			fmt.Fprintf(&b, "%q ", *c.Message.Content)
		}
		for _, tc := range c.Message.ToolCalls {
			fmt.Fprintf(&b, "%s ", tc.Function)
		}
		fmt.Fprintf(&b, "%s %s|", c.Logprobs, c.FinishReason)
	}
	return b.String(), nil
}

// retryable reports whether greedyAnswers failed with a 503/529 or a
// stream error: what a pipeline being re-placed answers.
func retryable(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, ": 503 ") || strings.Contains(msg, ": 529 ") || strings.Contains(msg, "stream error")
}

var pipelinePrompts = []string{"shard me", "a pipeline of stages", "hidden states over gRPC", "bit for bit, please"}

// putPlacement writes the placement spec of the deep model through the
// admin settings API of n.
func putPlacement(t *testing.T, n *node.Node, spec string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"value": spec})
	req, _ := http.NewRequest(http.MethodPut, n.URL()+"/admin/api/cluster/settings/"+cluster.PlacementSpecPrefix+deepModel, strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("placement setting: %d %s", resp.StatusCode, raw)
	}
}

// readyPipeline waits until /admin/api/cluster on n shows the deep model
// in a ready pipeline of stages stages, and returns it.
func readyPipeline(t *testing.T, n *node.Node, stages int, timeout time.Duration) cluster.PlacementInfo {
	t.Helper()
	var got cluster.PlacementInfo
	waitUntil(t, timeout, fmt.Sprintf("a ready pipeline of %d stages", stages), func() bool {
		_, doc := clusterDoc(t, n.URL(), "k")
		for _, p := range doc.Placements {
			if p.Model != deepModel || p.NumLayers != 6 || len(p.Stages) != stages {
				continue
			}
			for _, st := range p.Stages {
				if st.State != "ready" {
					return false
				}
			}
			got = p
			return true
		}
		return false
	})
	return got
}

func startPipelineCluster(t *testing.T, models string) map[string]*node.Node {
	t.Helper()
	nodes := map[string]*node.Node{}
	opts := func(c node.ClusterConfig) nodetest.Options {
		return nodetest.Options{APIKey: "k", ModelsDir: models, Backend: "cpu", Cluster: c}
	}
	nodes["a"] = nodetest.Start(t, opts(nodetest.Member("a", 3, nil)))
	seed := []string{nodes["a"].Cluster().GossipAddr()}
	for _, id := range []string{"b", "c"} {
		nodes[id] = nodetest.Start(t, opts(nodetest.Member(id, 3, seed)))
	}
	waitUntil(t, 15*time.Second, "a leader known to all three", func() bool {
		l := nodes["a"].Cluster().Leader()
		return l != "" && nodes["b"].Cluster().Leader() == l && nodes["c"].Cluster().Leader() == l
	})
	return nodes
}

// checkStageWeights asserts that each stage of p holds exactly the bytes
// of its own tensors, on the node it was planned on.
func checkStageWeights(t *testing.T, nodes map[string]*node.Node, models string, p cluster.PlacementInfo) {
	t.Helper()
	for i, st := range p.Stages {
		want := stageBytes(t, models, int(st.Layers[0]), int(st.Layers[1]), 6)
		var got int64 = -1
		n := nodes[st.Node]
		if i == 0 {
			for _, s := range n.Runner().List() {
				if s.ID == deepModel {
					got = s.Bytes
				}
			}
		} else {
			for _, s := range n.Stages() {
				if s.Model == deepModel && s.Generation == p.Generation && s.Layers.Start == int(st.Layers[0]) && s.Layers.End == int(st.Layers[1]) {
					got = s.WeightBytes
				}
			}
		}
		if got != want {
			t.Errorf("stage %d on %s, layers %v: %d weight bytes, want %d (its tensors only)", i, st.Node, st.Layers, got, want)
		}
	}
}

// TestPipelineStages: the deep model forced into 2, then 3 pipeline
// stages by its placement setting gives, through every node of the
// cluster and with all requests at once, the same greedy tokens and
// logprobs as the model on one node (same CPU backend), on OpenAI chat
// (plain and streamed), Anthropic messages and OpenClaw agent turns, and the same sampled
// answers (seeded temperature with penalties, logit bias and logprobs, a
// json_schema response format, a forced tool call), which the last stage
// draws; each stage holds only its layers' weights.
func TestPipelineStages(t *testing.T) {
	models := deepModels(t)
	ref := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Backend: "cpu"})
	want := map[string]answer{}
	wantSampled := map[string]string{}
	for _, p := range pipelinePrompts {
		a, _, err := greedyAnswers(ref.URL(), p)
		if err != nil {
			t.Fatal(err)
		}
		want[p] = a
		if wantSampled[p], err = sampledAnswers(ref.URL(), p); err != nil {
			t.Fatal(err)
		}
	}
	nodes := startPipelineCluster(t, models)
	for _, stages := range []int{2, 3} {
		t.Run(fmt.Sprintf("stages=%d", stages), func(t *testing.T) {
			putPlacement(t, nodes["c"], fmt.Sprintf(`{"replicas":1,"stages":%d}`, stages))
			p := readyPipeline(t, nodes["a"], stages, 30*time.Second)
			t.Logf("pipeline: generation %d, stages %+v", p.Generation, p.Stages)
			if p.State != "ready" {
				t.Errorf("/admin/api/cluster says the pipeline is %q, want ready", p.State)
			}
			checkStageWeights(t, nodes, models, p)
			// Every node's routes name the first stage only.
			waitUntil(t, 10*time.Second, "routes to the first stage", func() bool {
				for _, n := range nodes {
					if ids := routeIDs(n, deepModel); len(ids) != 1 || ids[0] != p.Stages[0].Node {
						return false
					}
				}
				return true
			})
			// One client per prompt, all at once, spread over the nodes
			// (the 2-core CI machine under -race: more at once starves
			// gossip into declaring nodes dead).
			var wg sync.WaitGroup
			errs := make(chan error, len(pipelinePrompts))
			for i, prompt := range pipelinePrompts {
				id := []string{"a", "b", "c"}[i%3]
				n := nodes[id]
				wg.Add(1)
				go func() {
					defer wg.Done()
					// A node that gossip declares dead under load (2
					// shared cores, -race) gets its pipeline re-placed:
					// the requests on it fail retryably, and a client
					// retries them, as this one does.
					got, servedBy, err := greedyAnswers(n.URL(), prompt)
					for try := 0; err != nil && retryable(err) && try < 5; try++ {
						time.Sleep(500 * time.Millisecond)
						got, servedBy, err = greedyAnswers(n.URL(), prompt)
					}
					switch {
					case err != nil:
						errs <- fmt.Errorf("via %s: %q: %v", id, prompt, err)
						return
					case servedBy != p.Stages[0].Node:
						errs <- fmt.Errorf("via %s: %q served by %q, want the first stage %s", id, prompt, servedBy, p.Stages[0].Node)
					case got != want[prompt]:
						errs <- fmt.Errorf("via %s: %q:\n got %+v\nwant %+v", id, prompt, got, want[prompt])
					}
					sampled, err := sampledAnswers(n.URL(), prompt)
					for try := 0; err != nil && retryable(err) && try < 5; try++ {
						time.Sleep(500 * time.Millisecond)
						sampled, err = sampledAnswers(n.URL(), prompt)
					}
					switch {
					case err != nil:
						errs <- fmt.Errorf("via %s: %q sampled: %v", id, prompt, err)
					case sampled != wantSampled[prompt]:
						errs <- fmt.Errorf("via %s: %q sampled:\n got %s\nwant %s", id, prompt, sampled, wantSampled[prompt])
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			// backend_override goes to the pipeline on its backend, and
			// is refused on another; no node loads a whole copy for it.
			for _, id := range []string{"a", "b", "c"} {
				for _, tc := range []struct {
					backend string
					code    int
					msg     string
				}{
					{"cpu", 200, ""},
					{"mlx", 503, "is sharded into pipeline stages"},
				} {
					body := `{"model":"deep","messages":[{"role":"user","content":"override"}],"max_tokens":3,"temperature":0,"backend_override":"` + tc.backend + `"}`
					code, servedBy, msg := 0, "", ""
					for try := 0; try < 5; try++ {
						resp, err := pipePost(nodes[id].URL(), "/v1/chat/completions", body)
						if err != nil {
							t.Fatal(err)
						}
						raw, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						var e errorBody
						_ = json.Unmarshal(raw, &e)
						code, servedBy, msg = resp.StatusCode, resp.Header.Get("X-Fusion-Node"), e.Error.Message
						if code == tc.code || tc.code != 200 {
							break
						}
						time.Sleep(500 * time.Millisecond) // re-placed under load: retry
					}
					if code != tc.code || !strings.Contains(msg, tc.msg) || code == 200 && servedBy != p.Stages[0].Node {
						t.Errorf("backend_override %s via %s: %d %q served by %q, want %d with %q from the first stage %s",
							tc.backend, id, code, msg, servedBy, tc.code, tc.msg, p.Stages[0].Node)
					}
				}
			}
			for id, n := range nodes {
				for _, s := range n.Runner().List() {
					if s.ID == deepModel && id != p.Stages[0].Node && (s.State == runner.StateReady || s.State == runner.StateIdle) {
						t.Errorf("%s holds a whole copy of the sharded model (%v)", id, s.State)
					}
				}
			}
			// A client that goes away mid-stream frees its sequence's KV
			// on every stage.
			ctx, cancel := context.WithCancel(context.Background())
			body := `{"model":"deep","messages":[{"role":"user","content":"cancel me"}],"max_tokens":400,"temperature":0,"stream":true}`
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, nodes["c"].URL()+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer k")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
				t.Fatal(err)
			}
			held := func() (n int64) {
				for _, nd := range nodes {
					n += nd.PipelineSequences() + nd.Runner().Stats().KVBytes
				}
				return n
			}
			if held() == 0 {
				t.Error("no stage holds the streaming request's KV")
			}
			cancel()
			resp.Body.Close()
			waitUntil(t, 10*time.Second, "every stage's KV freed after the cancel", func() bool { return held() == 0 })
		})
	}
}

// streamOnce runs one streamed greedy chat on url and classifies how it
// ended: "ok" (finished), "503" (refused before the first byte, with
// Retry-After or a retryable status), "stream-error" (an error event
// after the first byte), or an error for anything else (a hang is the
// client's timeout).
func streamOnce(client *http.Client, url, prompt string) (string, error) {
	body := fmt.Sprintf(`{"model":"deep","messages":[{"role":"user","content":%q}],"max_tokens":48,"temperature":0,"stream":true}`, prompt)
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == 529 {
		return "503", nil
	}
	if resp.StatusCode != 200 {
		raw, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, raw)
	}
	sc := bufio.NewScanner(resp.Body)
	finished := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			break
		}
		if strings.Contains(data, `"error"`) {
			return "stream-error", nil
		}
		if strings.Contains(data, `"finish_reason":"`) {
			finished = true
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if !finished {
		return "", fmt.Errorf("stream ended without a finish reason or an error")
	}
	return "ok", nil
}

// TestPipelineStageKilled: the middle stage of a 3-stage pipeline is
// killed (its member closed as in a crash) while clients stream through
// the other two nodes. No request hangs (each is bounded by its client's
// timeout): each finishes, is refused with a retryable 503 before its
// first byte, or ends with a stream error after it. The planner re-places
// the model on the two survivors (a new generation, two stages) and it
// serves again, bit for bit as one node would; the time from the kill to
// the first success is logged.
func TestPipelineStageKilled(t *testing.T) {
	models := deepModels(t)
	ref := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Backend: "cpu"})
	want, _, err := greedyAnswers(ref.URL(), pipelinePrompts[0])
	if err != nil {
		t.Fatal(err)
	}
	nodes := startPipelineCluster(t, models)
	putPlacement(t, nodes["a"], `{"replicas":1,"stages":3}`)
	before := readyPipeline(t, nodes["a"], 3, 30*time.Second)
	victim := before.Stages[1].Node
	var survivors []string
	for _, st := range before.Stages {
		if st.Node != victim {
			survivors = append(survivors, st.Node)
		}
	}
	waitUntil(t, 10*time.Second, "routes to the first stage", func() bool {
		ids := routeIDs(nodes[survivors[1]], deepModel)
		return len(ids) == 1 && ids[0] == before.Stages[0].Node
	})

	client := &http.Client{Timeout: 30 * time.Second}
	var (
		mu       sync.Mutex
		outcomes = map[string]int{}
		failures []error
		killedAt time.Time
		firstOK  time.Duration
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := nodes[survivors[i%2]].URL()
			for {
				select {
				case <-stop:
					return
				default:
				}
				began := time.Now()
				out, err := streamOnce(client, url, pipelinePrompts[i])
				mu.Lock()
				switch {
				case err != nil:
					failures = append(failures, err)
				default:
					outcomes[out]++
					// A request begun once the stage was gone cannot
					// have run on the old pipeline.
					if out == "ok" && !killedAt.IsZero() && began.After(killedAt) && firstOK == 0 {
						firstOK = time.Since(killedAt)
					}
				}
				mu.Unlock()
				if out == "503" {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	// Let the clients get going, then kill the middle stage mid-stream.
	waitUntil(t, 20*time.Second, "requests under way", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return outcomes["ok"] >= 2
	})
	if err := nodes[victim].Cluster().Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	killedAt = time.Now() // its gRPC server is stopped: no step reaches it
	mu.Unlock()
	// Until it is re-placed, the status names the pipeline broken.
	waitUntil(t, 30*time.Second, "the pipeline shown broken or re-placed", func() bool {
		_, doc := clusterDoc(t, nodes[survivors[0]].URL(), "k")
		for _, p := range doc.Placements {
			if p.Model == deepModel && (p.State == "broken" || p.Generation > before.Generation) {
				return true
			}
		}
		return false
	})
	waitUntil(t, 60*time.Second, "a success after the kill", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return firstOK > 0
	})
	close(stop)
	wg.Wait()
	t.Logf("kill of the middle stage %s → first success %v; outcomes %v", victim, firstOK, outcomes)
	for _, err := range failures {
		t.Errorf("a request neither finished nor failed cleanly: %v", err)
	}
	after := readyPipeline(t, nodes[survivors[0]], 2, 10*time.Second)
	if after.Generation <= before.Generation {
		t.Errorf("re-placed at generation %d, not after %d", after.Generation, before.Generation)
	}
	for _, st := range after.Stages {
		if st.Node == victim {
			t.Errorf("re-placed on the killed node: %+v", after.Stages)
		}
	}
	got, _, err := greedyAnswers(nodes[survivors[1]].URL(), pipelinePrompts[0])
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("after re-placing:\n got %+v\nwant %+v", got, want)
	}
}

// TestPipelineAutoShard: three nodes whose memory budgets are each too
// small for the deep model (weights and a context's KV) but hold it two
// together: a request for it, with no placement setting, is told to retry
// while the planner shards it across the fewest nodes (two: three layers
// and three with the output head, as their KV at the context fits); then every node serves it through the
// pipeline, bit for bit as one node does, and no node loads a whole copy.
// A qwen3moe GGUF of the same shape is sharded the same way (its layers
// and costs read from the file's header) and answers as on one node. A
// model the three budgets cannot hold even together
// is refused with a 503 naming its need and the total.
func TestPipelineAutoShard(t *testing.T) {
	models := t.TempDir()
	o := demo.DefaultOptions()
	o.Layers, o.Seed = 6, 18
	demotest.Create(t, filepath.Join(models, deepModel), o) // deepModels' model
	o.Hidden, o.Seed = 256, 19
	if _, err := demo.Create(filepath.Join(models, "big"), o); err != nil {
		t.Fatal(err)
	}
	// A qwen3moe GGUF of the deep model's width and depth: its layers come
	// from the file's metadata, its stages' bytes from its tensor table.
	demotest.Create(t, filepath.Join(models, "moeg"), demo.Options{Arch: "qwen3_moe", Layers: 6, Hidden: 64, Heads: 4, KVHeads: 2,
		Intermediate: 128, Experts: 4, ExpertsPerTok: 2, MoEIntermediate: 64, Seed: 20, Format: demo.FormatGGUF, GGUFType: "q8_0"})
	ref := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Backend: "cpu"})
	need, bigNeed := ref.Runner().ModelNeed(deepModel), ref.Runner().ModelNeed("big")
	budget := need * 6 / 10 // one node: too small; two: enough
	if bigNeed <= 3*budget {
		t.Fatalf("the big model needs %d bytes, not more than three budgets of %d", bigNeed, budget)
	}
	if moeNeed := ref.Runner().ModelNeed("moeg"); moeNeed <= budget || moeNeed >= 2*budget {
		t.Fatalf("the GGUF mixture needs %d bytes, not between one and two budgets of %d", moeNeed, budget)
	}
	want, _, err := greedyAnswers(ref.URL(), pipelinePrompts[0])
	if err != nil {
		t.Fatal(err)
	}
	moeBody := `{"model":"moeg","messages":[{"role":"user","content":"experts"}],"max_tokens":6,"temperature":0,"logprobs":true,"top_logprobs":2}`
	moeAnswer := func(url string) (int, string) {
		t.Helper()
		resp, err := pipePost(url, "/v1/chat/completions", moeBody)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var out struct {
			Choices []struct {
				Message  json.RawMessage `json:"message"`
				Logprobs json.RawMessage `json:"logprobs"`
			} `json:"choices"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(raw, &out) != nil || len(out.Choices) != 1 {
			return resp.StatusCode, string(raw)
		}
		return 200, string(out.Choices[0].Message) + string(out.Choices[0].Logprobs)
	}
	moeStatus, moeWant := moeAnswer(ref.URL())
	if moeStatus != 200 {
		t.Fatalf("the GGUF mixture on one node: %d %s", moeStatus, moeWant)
	}
	nodes := map[string]*node.Node{}
	opts := func(c node.ClusterConfig) nodetest.Options {
		return nodetest.Options{APIKey: "k", ModelsDir: models, Backend: "cpu", MemoryBudget: budget, Cluster: c}
	}
	nodes["a"] = nodetest.Start(t, opts(nodetest.Member("a", 3, nil)))
	seed := []string{nodes["a"].Cluster().GossipAddr()}
	for _, id := range []string{"b", "c"} {
		nodes[id] = nodetest.Start(t, opts(nodetest.Member(id, 3, seed)))
	}
	// Until a node has heard the inventories (budgets and needs), it
	// cannot tell that the model fits no node: it would load it whole.
	waitUntil(t, 15*time.Second, "every node hearing every inventory with the budgets", func() bool {
		for _, n := range nodes {
			if k, err := n.Cluster().Fit(deepModel); err != nil || k != 2 {
				return false
			}
			if k, err := n.Cluster().Fit("moeg"); err != nil || k != 2 {
				return false
			}
		}
		return true
	})
	var first string
	var retried int
	waitUntil(t, 60*time.Second, "the deep model served through an automatic pipeline", func() bool {
		resp, err := pipePost(nodes["b"].URL(), "/v1/chat/completions", `{"model":"deep","messages":[{"role":"user","content":"auto"}],"max_tokens":2}`)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			return true
		}
		if resp.StatusCode != 503 {
			t.Fatalf("while sharding: %d %s, want 503 then 200", resp.StatusCode, raw)
		}
		if first == "" {
			first = string(raw)
		}
		retried++
		time.Sleep(200 * time.Millisecond)
		return false
	})
	t.Logf("before the pipeline was ready (%d refusals): %s", retried, first)
	if retried == 0 || !strings.Contains(first, "being sharded across 2 nodes") {
		t.Errorf("the first request got %q, want a 503 saying the model is being sharded across 2 nodes", first)
	}
	p := readyPipeline(t, nodes["a"], 2, 30*time.Second)
	// Compute per token alone would cut 4 + 2 and the head (1.1 layers),
	// but each stage holds its layers' KV at the context (a sixth of the
	// need each): four layers' overflow a budget of 6/10 of the need, so
	// three and three.
	if p.Stages[0].Layers != [2]uint32{0, 3} || p.Stages[1].Layers != [2]uint32{3, 6} {
		t.Errorf("stages %+v, want layers [0,3) and [3,6) (four layers' KV overflow a node)", p.Stages)
	}
	checkStageWeights(t, nodes, models, p)
	for _, id := range []string{"a", "b", "c"} {
		got, _, err := greedyAnswers(nodes[id].URL(), pipelinePrompts[0])
		for try := 0; err != nil && retryable(err) && try < 5; try++ {
			time.Sleep(500 * time.Millisecond)
			got, _, err = greedyAnswers(nodes[id].URL(), pipelinePrompts[0])
		}
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("via %s:\n got %+v\nwant %+v", id, got, want)
		}
	}
	// No node loaded a whole copy on the way.
	for id, n := range nodes {
		for _, s := range n.Runner().List() {
			if s.ID == deepModel && id != p.Stages[0].Node && s.State != runner.StateUnloaded {
				t.Errorf("%s holds a whole copy of the sharded model (%v)", id, s.State)
			}
		}
	}

	// The GGUF mixture is sharded too, and answers as on one node.
	var moeGot string
	waitUntil(t, 60*time.Second, "the GGUF mixture served through an automatic pipeline", func() bool {
		status, got := moeAnswer(nodes["b"].URL())
		if status != 200 && status != 503 {
			t.Fatalf("while sharding the GGUF mixture: %d %s, want 503 then 200", status, got)
		}
		moeGot = got
		if status != 200 {
			time.Sleep(200 * time.Millisecond)
		}
		return status == 200
	})
	if moeGot != moeWant {
		t.Errorf("the GGUF mixture as a pipeline:\n%s\non one node:\n%s", moeGot, moeWant)
	}
	_, doc := clusterDoc(t, nodes["a"].URL(), "k")
	sharded := false
	for _, p := range doc.Placements {
		if p.Model == "moeg" {
			sharded = p.NumLayers == 6 && len(p.Stages) == 2
			t.Logf("the GGUF mixture's placement: %+v", p)
		}
	}
	if !sharded {
		t.Errorf("the GGUF mixture is not placed as a pipeline of two stages: %+v", doc.Placements)
	}

	resp, err := pipePost(nodes["c"].URL(), "/v1/chat/completions", `{"model":"big","messages":[{"role":"user","content":"too big"}],"max_tokens":2}`)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	msg := string(raw)
	t.Logf("a model too big for the cluster: %d %s", resp.StatusCode, msg)
	if resp.StatusCode != 503 || !strings.Contains(msg, "insufficient memory") || !strings.Contains(msg, strconv.FormatInt(bigNeed, 10)) ||
		!strings.Contains(msg, strconv.FormatInt(3*budget, 10)) {
		t.Errorf("a model too big for the cluster: %d %s, want a 503 for insufficient memory naming %d bytes needed and %d in all", resp.StatusCode, msg, bigNeed, 3*budget)
	}
	for id, n := range nodes {
		for _, s := range n.Runner().List() {
			if s.ID == "big" && s.State != runner.StateUnloaded {
				t.Errorf("%s: big is %v", id, s.State)
			}
		}
	}
}
