package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"fusion/cluster"
	"fusion/cluster/remote"
	"fusion/node"
	"fusion/node/nodetest"
)

func clusterDoc(t *testing.T, url, key string) (int, cluster.StatusDoc) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+"/admin/api/cluster", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc cluster.StatusDoc
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, doc
}

// postChat posts a chat completion body to n with the API key "k".
func postChat(t *testing.T, n *node.Node, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, n.URL()+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestClusteredNodes: two nodes with cluster settings form a cluster,
// /admin/api/cluster lists both with their HTTP and gRPC addresses, and a
// stopped node leaves it gracefully. A node without cluster settings has
// no cluster route.
func TestClusteredNodes(t *testing.T) {
	models := nodetest.Models(t)
	a := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Cluster: nodetest.Member("a", 1, nil)})
	b := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Cluster: nodetest.Member("b", 0, []string{a.Cluster().GossipAddr()})})

	deadline := time.Now().Add(10 * time.Second)
	for {
		code, doc := clusterDoc(t, a.URL(), "k")
		ok := code == 200 && doc.Self == "a" && doc.Leader == "a" && len(doc.Members) == 2
		if ok {
			m := doc.Members[1]
			ok = m.ID == "b" && m.HTTP == b.URL() && m.GRPC == b.Cluster().GRPCAddr() && m.Status == "alive" && m.InRaft
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster document: %d %+v", code, doc)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, _ := clusterDoc(t, a.URL(), "wrong"); code != http.StatusUnauthorized {
		t.Fatalf("without the API key: %d", code)
	}

	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		_, doc := clusterDoc(t, a.URL(), "k")
		gone := true
		for _, m := range doc.Members {
			if m.ID == "b" && (m.InRaft || m.Status != "left") {
				gone = false
			}
		}
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b did not leave: %+v", doc.Members)
		}
		time.Sleep(20 * time.Millisecond)
	}

	lone := nodetest.Start(t, nodetest.Options{ModelsDir: models})
	if lone.Cluster() != nil {
		t.Fatal("a node without cluster settings has a cluster member")
	}
	if code, _ := clusterDoc(t, lone.URL(), ""); code != http.StatusNotFound {
		t.Fatalf("lone node /admin/api/cluster: %d", code)
	}
}

// TestClusterForwards: a model on node a's disk only is served through
// node b, which forwards to a: the answer names a in X-Fusion-Node, equals
// a's own greedy answer, and b's model list includes the model. A lone
// node names itself.
func TestClusterForwards(t *testing.T) {
	a := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: nodetest.Models(t), Cluster: nodetest.Member("a", 1, nil)})
	b := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: t.TempDir(), Cluster: nodetest.Member("b", 0, []string{a.Cluster().GossipAddr()})})

	chat := func(n *node.Node) (string, string, int) {
		t.Helper()
		body := `{"model":"demo","messages":[{"role":"user","content":"forward me"}],"max_tokens":6,"temperature":0,"logprobs":true}`
		resp := postChat(t, n, body)
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out struct {
			Choices []struct {
				Logprobs json.RawMessage `json:"logprobs"`
			} `json:"choices"`
		}
		_ = json.Unmarshal(raw, &out)
		if resp.StatusCode != 200 || len(out.Choices) != 1 {
			return "", resp.Header.Get("X-Fusion-Node"), resp.StatusCode
		}
		return string(out.Choices[0].Logprobs), resp.Header.Get("X-Fusion-Node"), resp.StatusCode
	}
	direct, servedBy, code := chat(a)
	if code != 200 || servedBy != "a" {
		t.Fatalf("direct on a: %d, served by %q", code, servedBy)
	}
	// b learns from the replicated inventory that a has the model loaded.
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, servedBy, code := chat(b)
		if code == 200 {
			if servedBy != "a" {
				t.Fatalf("b answered, served by %q; want a", servedBy)
			}
			if got != direct {
				t.Fatalf("forwarded answer differs from the direct one:\n got %s\nwant %s", got, direct)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b never forwarded: last status %d", code)
		}
		time.Sleep(100 * time.Millisecond)
	}
	req, _ := http.NewRequest(http.MethodGet, b.URL()+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(raw), `"demo"`) {
		t.Errorf("b's model list lacks the peer's model: %s", raw)
	}

	// a's stats stream, as its peers see it: the node, its memory, and
	// the tokens it generates per second while a request runs.
	c, err := remote.Dial(a.Cluster().GRPCAddr(), a.Cluster().DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	busy := make(chan struct{})
	go func() { // requests run on a until the stats show them
		defer close(busy)
		for ctx.Err() == nil {
			req, _ := http.NewRequest(http.MethodPost, a.URL()+"/v1/chat/completions",
				strings.NewReader(`{"model":"demo","messages":[{"role":"user","content":"busy"}],"max_tokens":32}`))
			req.Header.Set("Authorization", "Bearer k")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()
	var last remote.PeerStats
	_ = c.WatchStats(ctx, 100*time.Millisecond, func(s remote.PeerStats) {
		last = s
		if s.TokensPerSecond > 0 && s.FreeMemoryBytes > 0 {
			cancel()
		}
	})
	cancel()
	<-busy
	if last.NodeID != "a" || last.TokensPerSecond <= 0 || last.FreeMemoryBytes <= 0 {
		t.Errorf("a's stats stream: %+v", last)
	}

	lone := nodetest.Start(t, nodetest.Options{})
	if _, servedBy, code := chat(lone); code != 200 || servedBy == "" {
		t.Errorf("lone node: %d, X-Fusion-Node %q", code, servedBy)
	}
}

// TestClusterLeaveDrainsStreams: a node leaving gracefully finishes the
// stream it runs for a peer (a client on a, the model only on b) before
// it leaves, and the cluster then lists it as left.
func TestClusterLeaveDrainsStreams(t *testing.T) {
	a := nodetest.Start(t, nodetest.Options{ModelsDir: t.TempDir(), Cluster: nodetest.Member("a", 1, nil)})
	b := nodetest.Start(t, nodetest.Options{ModelsDir: nodetest.Models(t), DrainTimeout: 30 * time.Second, Cluster: nodetest.Member("b", 0, []string{a.Cluster().GossipAddr()})})
	bias := noEOSBias(t, b.URL())
	short := `{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Post(a.URL()+"/v1/chat/completions", "application/json", strings.NewReader(short))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 200 && resp.Header.Get("X-Fusion-Node") == "b" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a does not forward to b: %d", resp.StatusCode)
		}
	}

	body := `{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":300,"stream":true,"stream_options":{"include_usage":true},"logit_bias":` + bias + `}`
	resp, err := http.Post(a.URL()+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("X-Fusion-Node") != "b" {
		t.Fatalf("stream served by %q", resp.Header.Get("X-Fusion-Node"))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Scan() // running on b
	stopped := make(chan error, 1)
	go func() { stopped <- b.Stop(context.Background()) }()
	if last, finish, tokens := readChatStream(sc); last != "data: [DONE]" || finish != "length" || tokens != 300 {
		t.Errorf("forwarded stream cut while b left: finish %q after %d tokens, last %q", finish, tokens, last)
	}
	if err := <-stopped; err != nil {
		t.Errorf("b.Stop: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, doc := clusterDoc(t, a.URL(), "")
		left := false
		for _, m := range doc.Members {
			left = left || m.ID == "b" && m.Status == "left" && !m.InRaft
		}
		if left {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b not listed as left: %+v", doc.Members)
		}
	}
}
