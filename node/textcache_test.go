package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	ant "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"fusion/engine/demo"
	"fusion/engine/runner"
	"fusion/internal/testenv"
	"fusion/node"
	"fusion/node/nodetest"
)

// qwenModel is a demo model with Qwen3's real tokenizer (151k tokens, an
// 11 MB tokenizer.json), the size whose parse made counting slow: long
// enough that concurrent first requests overlap it.
const qwenModel = "qwen3-tok"

// qwenModels writes qwenModel into a fresh models directory.
func qwenModels(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := demo.Create(filepath.Join(dir, qwenModel), demo.Options{Arch: "qwen3", Seed: 3, VocabFrom: testenv.TokenizerDir(t, "qwen3"),
		Layers: 1, Hidden: 32, Heads: 2, KVHeads: 1, Intermediate: 64}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// countTokens posts a one-message chat for model to one of the three
// counting routes of n and returns the status and the count.
func countTokens(t *testing.T, n *node.Node, route, model string) (int, int) {
	t.Helper()
	body := `{"model":"` + model + `","messages":[{"role":"user","content":"How many tokens is this?"}]}`
	code, raw := apiDo(t, n, http.MethodPost, route, body)
	var out struct {
		Count       int `json:"count"`
		InputTokens int `json:"input_tokens"`
	}
	if code == http.StatusOK {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s: %v: %s", route, err, raw)
		}
	}
	return code, max(out.Count, out.InputTokens)
}

var countRoutes = []string{"/v1/messages/count_tokens", "/v1/count_tokens", "/tokenize"}

func textStats(n *node.Node) string { return fmt.Sprintf("%+v", n.Runner().TextCacheStats()) }

func modelState(n *node.Node, model string) runner.ModelState {
	for _, m := range n.Runner().List() {
		if m.ID == model {
			return m.State
		}
	}
	return ""
}

// TestCountTokensUnloadedParsesOnce: 100 token counts for a model whose
// weights are not loaded — through the Anthropic SDK's count_tokens,
// /v1/count_tokens and /tokenize — parse its tokenizer once, agree with
// each other, and leave the model unloaded; generating afterwards loads
// the weights without parsing the tokenizer again.
func TestCountTokensUnloadedParsesOnce(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: "k"})
	client := ant.NewClient(option.WithBaseURL(n.URL()), option.WithAPIKey("k"), option.WithMaxRetries(0))
	ctx := context.Background()
	var want int
	for i := range 100 {
		var got int
		if i%2 == 0 {
			res, err := client.Messages.CountTokens(ctx, ant.MessageCountTokensParams{Model: nodetest.Model,
				Messages: []ant.MessageParam{ant.NewUserMessage(ant.NewTextBlock("How many tokens is this?"))}})
			if err != nil {
				t.Fatalf("count %d (SDK): %v", i, err)
			}
			got = int(res.InputTokens)
		} else {
			route := countRoutes[1+i%4/2]
			code, c := countTokens(t, n, route, nodetest.Model)
			if code != http.StatusOK {
				t.Fatalf("count %d (%s): status %d", i, route, code)
			}
			got = c
		}
		if i == 0 {
			want = got
		}
		if got != want || got == 0 {
			t.Fatalf("count %d: %d tokens, the first said %d", i, got, want)
		}
	}
	if st := n.Runner().TextCacheStats(); st.Parses != 1 {
		t.Fatalf("100 counts on an unloaded model parsed its tokenizer %d times: %s", st.Parses, textStats(n))
	}
	if s := modelState(n, nodetest.Model); s != runner.StateUnloaded {
		t.Fatalf("counting tokens left the model %s", s)
	}

	resp, err := client.Messages.New(ctx, ant.MessageNewParams{Model: nodetest.Model, MaxTokens: 1,
		Messages: []ant.MessageParam{ant.NewUserMessage(ant.NewTextBlock("How many tokens is this?"))}})
	if err != nil {
		t.Fatal(err)
	}
	if int(resp.Usage.InputTokens) != want {
		t.Errorf("generation counted %d input tokens, count_tokens %d", resp.Usage.InputTokens, want)
	}
	if st := n.Runner().TextCacheStats(); st.Parses != 1 {
		t.Fatalf("loading the weights parsed the tokenizer again: %s", textStats(n))
	}
	if _, c := countTokens(t, n, "/v1/count_tokens", nodetest.Model); c != want {
		t.Errorf("loaded count %d, unloaded %d", c, want)
	}
}

// TestCountTokensConcurrentFirstParsesOnce: concurrent first counts for a
// model nothing has parsed yet share one parse of its tokenizer.
func TestCountTokensConcurrentFirstParsesOnce(t *testing.T) {
	const clients = 16
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: qwenModels(t)})
	var wg sync.WaitGroup
	codes, counts := make([]int, clients), make([]int, clients)
	start := make(chan struct{})
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			codes[i], counts[i] = countTokens(t, n, countRoutes[i%len(countRoutes)], qwenModel)
		}()
	}
	close(start)
	wg.Wait()
	for i := range clients {
		if codes[i] != http.StatusOK || counts[i] == 0 || counts[i] != counts[0] {
			t.Fatalf("client %d (%s): status %d, %d tokens (client 0: %d)", i, countRoutes[i%len(countRoutes)], codes[i], counts[i], counts[0])
		}
	}
	if st := n.Runner().TextCacheStats(); st.Parses != 1 {
		t.Fatalf("%d concurrent first counts parsed the tokenizer %d times: %s", clients, st.Parses, textStats(n))
	}
}

// TestCountTokensThroughForwardingNode: in a 2-node cluster where only a
// has the model (unloaded), 100 counts sent to b are forwarded and parse
// the tokenizer once, on a; b parses nothing.
func TestCountTokensThroughForwardingNode(t *testing.T) {
	a := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: nodetest.Models(t), Cluster: nodetest.Member("a", 1, nil)})
	b := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: t.TempDir(), Cluster: nodetest.Member("b", 0, []string{a.Cluster().GossipAddr()})})

	code, direct := countTokens(t, a, "/v1/messages/count_tokens", nodetest.Model)
	if code != http.StatusOK {
		t.Fatalf("direct count on a: %d", code)
	}
	// b learns from the replicated inventory that a has the model.
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, _ := countTokens(t, b, "/v1/messages/count_tokens", nodetest.Model)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b never forwarded the count: last status %d", code)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := range 100 {
		route := countRoutes[i%len(countRoutes)]
		code, got := countTokens(t, b, route, nodetest.Model)
		if code != http.StatusOK || got != direct {
			t.Fatalf("count %d through b (%s): status %d, %d tokens; a says %d", i, route, code, got, direct)
		}
	}
	if st := a.Runner().TextCacheStats(); st.Parses != 1 {
		t.Fatalf("a parsed the tokenizer %d times for 102 counts: %s", st.Parses, textStats(a))
	}
	if st := b.Runner().TextCacheStats(); st.Parses != 0 {
		t.Fatalf("b, which has no model, parsed: %s", textStats(b))
	}
	if s := modelState(a, nodetest.Model); s != runner.StateUnloaded {
		t.Fatalf("counting tokens left a's model %s", s)
	}
}
