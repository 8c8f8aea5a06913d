package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	ant "github.com/anthropics/anthropic-sdk-go/v2"
	antopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"fusion/node"
	"fusion/node/nodetest"
	"fusion/router/auth"
)

// adminDo sends an admin request with the admin key "k".
func keyAdminDo(t *testing.T, method, url, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// chatAs runs a one-token chat through the official OpenAI SDK with key
// and returns its error (nil: a 200).
func chatAs(n *node.Node, key, model string) error {
	c := oa.NewClient(option.WithBaseURL(n.URL()+"/v1"), option.WithAPIKey(key), option.WithMaxRetries(0))
	_, err := c.Chat.Completions.New(context.Background(), oa.ChatCompletionNewParams{Model: model, MaxTokens: oa.Int(1),
		Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage("hi")}})
	return err
}

func apiStatus(err error) (int, *oa.Error) {
	var e *oa.Error
	if errors.As(err, &e) {
		return e.StatusCode, e
	}
	return 0, nil
}

// TestSubkeysCluster: in a three-node cluster a sub-key made on one node
// works on every node, is refused another model (403, in each dialect's
// shape), stops at its rate limit counted across the nodes (429 with
// Retry-After on each), is listed with its cluster-wide usage, and once
// revoked on one node fails on the two others within a second.
func TestSubkeysCluster(t *testing.T) {
	models := nodetest.Models(t)
	start := func(id string, expect int, join []string) *node.Node {
		return nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, KeyUsageInterval: 50 * time.Millisecond,
			Cluster: nodetest.Member(id, expect, join)})
	}
	a := start("a", 1, nil)
	b := start("b", 0, []string{a.Cluster().GossipAddr()})
	c := start("c", 0, []string{a.Cluster().GossipAddr()})
	nodes := []*node.Node{a, b, c}
	waitUntil(t, 60*time.Second, "three members in raft", func() bool {
		code, doc := clusterDoc(t, c.URL(), "k")
		in := 0
		for _, m := range doc.Members {
			if m.InRaft && m.Status == "alive" {
				in++
			}
		}
		return code == 200 && in == 3 && doc.Leader != ""
	})

	// Made on b (a follower or not: the write goes through the leader).
	const rpm = 6
	code, body := keyAdminDo(t, "POST", b.URL()+"/admin/api/subkeys",
		`{"name":"ci","scopes":["inference"],"models":["demo"],"rate_limit":{"requests_per_minute":6}}`)
	var key auth.KeyDoc
	if code != 201 || json.Unmarshal(body, &key) != nil || key.Key == "" {
		t.Fatalf("create: %d %s", code, body)
	}
	if s := time.Now().Second(); s > 45 {
		// The limit is a sliding window over minute windows: start early
		// in one so the previous window's weight does not move the count.
		time.Sleep(time.Duration(61-s) * time.Second)
	}
	for _, n := range nodes {
		waitUntil(t, 5*time.Second, "the key on "+n.Cluster().ID(), func() bool {
			st, _ := apiStatus(chatAs(n, key.Key, "other"))
			return st == http.StatusForbidden // known here, and the model check runs before the rate
		})
		err := chatAs(n, key.Key, "other")
		if st, e := apiStatus(err); st != 403 || e.Code != "model_not_allowed" {
			t.Fatalf("another model on %s: %v", n.Cluster().ID(), err)
		}
		ac := ant.NewClient(antopt.WithBaseURL(n.URL()), antopt.WithAPIKey(key.Key), antopt.WithMaxRetries(0))
		_, err = ac.Messages.New(context.Background(), ant.MessageNewParams{Model: "other", MaxTokens: 1,
			Messages: []ant.MessageParam{ant.NewUserMessage(ant.NewTextBlock("hi"))}})
		var ae *ant.Error
		if !errors.As(err, &ae) || ae.StatusCode != 403 || !strings.Contains(ae.RawJSON(), `"permission_error"`) {
			t.Fatalf("another model on %s, Anthropic dialect: %v", n.Cluster().ID(), err)
		}
	}
	// The rate, spread over the three nodes. Each node counts what it
	// admits and hears its peers' counts every 50 ms here; the test waits
	// for every node to have heard each request (the limit's tolerance is
	// what the others admit before that), so the cluster admits exactly
	// rpm and then refuses on every node.
	var slowest time.Duration
	for i := range rpm {
		n := nodes[i%3]
		if err := chatAs(n, key.Key, "demo"); err != nil {
			t.Fatalf("request %d on %s: %v", i+1, n.Cluster().ID(), err)
		}
		for _, m := range nodes {
			d := waitUntil(t, 10*time.Second, "every node to count the request", func() bool {
				got := m.KeyUsage()[key.ID].Requests
				if got > int64(i+1) {
					t.Fatalf("%s counts %d requests after %d", m.Cluster().ID(), got, i+1)
				}
				return got == int64(i+1)
			})
			slowest = max(slowest, d)
		}
	}
	t.Logf("slowest wait for every node to count a request: %v", slowest.Round(time.Millisecond))
	for _, n := range nodes {
		err := chatAs(n, key.Key, "demo")
		st, e := apiStatus(err)
		if st != 429 || e.Code != "rate_limit_exceeded" || e.Response.Header.Get("Retry-After") == "" {
			t.Fatalf("past the rate on %s: %v", n.Cluster().ID(), err)
		}
	}
	// Usage on any node counts every node's requests.
	code, body = keyAdminDo(t, "GET", c.URL()+"/admin/api/subkeys", "")
	var list struct{ Data []auth.KeyDoc }
	if code != 200 || json.Unmarshal(body, &list) != nil || len(list.Data) != 1 || list.Data[0].Usage.Requests != rpm {
		t.Fatalf("list on c: %d %s, want %d requests", code, body, rpm)
	}
	if got := a.KeyUsage()[key.ID].Requests; got != rpm {
		t.Fatalf("a's KeyUsage: %d requests, want %d", got, rpm)
	}

	// Revoked on a: refused on b and c within a second.
	fresh := auth.KeyDoc{}
	code, body = keyAdminDo(t, "POST", a.URL()+"/admin/api/subkeys", `{"scopes":["inference"]}`)
	if code != 201 || json.Unmarshal(body, &fresh) != nil {
		t.Fatalf("create: %d %s", code, body)
	}
	// A cheap probe: an empty chat body passes authentication and is a
	// 400; with the key revoked it is a 401.
	probe := func(n *node.Node) int {
		req, _ := http.NewRequest("POST", n.URL()+"/v1/chat/completions", strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer "+fresh.Key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, n := range nodes[1:] {
		waitUntil(t, 5*time.Second, "the fresh key on "+n.Cluster().ID(), func() bool { return probe(n) == 400 })
	}
	asked := time.Now()
	if code, body := keyAdminDo(t, "DELETE", a.URL()+"/admin/api/subkeys/"+fresh.ID, ""); code != 200 {
		t.Fatalf("delete: %d %s", code, body)
	}
	revoked := time.Now() // the revocation is committed when the DELETE answers
	t.Logf("DELETE answered in %v", revoked.Sub(asked).Round(time.Millisecond))
	for _, n := range nodes[1:] {
		for {
			st := probe(n)
			if st == 401 {
				break
			}
			if time.Since(revoked) > time.Second {
				t.Fatalf("the revoked key still works on %s after %v", n.Cluster().ID(), time.Since(revoked))
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("revoked on a, refused on %s %v later", n.Cluster().ID(), time.Since(revoked).Round(time.Millisecond))
	}
}

// TestNoOpenNode: without an API key a node refuses an address beyond
// loopback unless told it may; a cluster member refuses listeners beyond
// loopback without a secret unless told it may.
func TestNoOpenNode(t *testing.T) {
	cfg := node.Config{Listen: "0.0.0.0:0", DataDir: t.TempDir(), ModelsDir: t.TempDir(), Threads: 1}
	if _, err := node.New(cfg); !errors.Is(err, node.ErrNoAuth) {
		t.Fatalf("open node on 0.0.0.0: %v", err)
	}
	cfg.InsecureNoAuth = true
	n, err := node.New(cfg)
	if err != nil {
		t.Fatalf("with InsecureNoAuth: %v", err)
	}
	n.Stop(context.Background())
	cfg.Listen, cfg.InsecureNoAuth, cfg.APIKey = "127.0.0.1:0", false, ""
	cfg.Cluster = node.ClusterConfig{NodeID: "x", Listen: "0.0.0.0:0", RaftListen: "127.0.0.1:0", GRPCListen: "127.0.0.1:0"}
	if _, err := node.New(cfg); err == nil || !strings.Contains(err.Error(), "gossip listens on 0.0.0.0:0") {
		t.Fatalf("exposed gossip without a secret: %v", err)
	}
}

// TestSubkeysLoneNodeRestart: a node without a cluster keeps its
// sub-keys (hashes) in its data dir: a key made before a restart works
// after it, a key revoked before it stays revoked.
func TestSubkeysLoneNodeRestart(t *testing.T) {
	models, data := nodetest.Models(t), t.TempDir()
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, DataDir: data})
	var keep, gone auth.KeyDoc
	for _, d := range []*auth.KeyDoc{&keep, &gone} {
		code, b := keyAdminDo(t, "POST", n.URL()+"/admin/api/subkeys", `{"scopes":["inference"]}`)
		if code != 201 || json.Unmarshal(b, d) != nil {
			t.Fatalf("create: %d %s", code, b)
		}
	}
	if code, b := keyAdminDo(t, "DELETE", n.URL()+"/admin/api/subkeys/"+gone.ID, ""); code != 200 {
		t.Fatalf("delete: %d %s", code, b)
	}
	if err := n.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	again := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, DataDir: data})
	if err := chatAs(again, keep.Key, "demo"); err != nil {
		t.Fatalf("kept key after the restart: %v", err)
	}
	if st, _ := apiStatus(chatAs(again, gone.Key, "demo")); st != 401 {
		t.Fatalf("revoked key after the restart: %d", st)
	}
}

// TestSubkeyStats: a sub-key's generations are counted under its id in
// /admin/api/stats (session and all-time), the admin key's under none.
func TestSubkeyStats(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: nodetest.Models(t), DataDir: t.TempDir(),
		Cluster: node.ClusterConfig{NodeID: "solo"}})
	var key auth.KeyDoc
	if code, b := keyAdminDo(t, "POST", n.URL()+"/admin/api/subkeys", `{"scopes":["inference"]}`); code != 201 || json.Unmarshal(b, &key) != nil {
		t.Fatalf("create: %d %s", code, b)
	}
	for range 2 {
		if err := chatAs(n, key.Key, "demo"); err != nil {
			t.Fatal(err)
		}
	}
	if err := chatAs(n, "k", "demo"); err != nil {
		t.Fatal(err)
	}
	s := nodeStats(t, n, "solo")
	for path, want := range map[string]float64{
		"session.requests": 3, "session.keys." + key.ID + ".requests": 2, "alltime.keys." + key.ID + ".requests": 2,
	} {
		if got := num(s, path); got != want {
			t.Errorf("%s = %v, want %v", path, got, want)
		}
	}
	if got := num(s, "session.keys."+key.ID+".tokens_in"); got <= 0 {
		t.Errorf("the key's tokens in = %v", got)
	}
}
