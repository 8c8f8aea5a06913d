package node_test

import (
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"fusion/cluster"
	"fusion/node"
	"fusion/node/nodetest"
)

// TestNoEarly404: in a freshly formed three-node cluster, node c (an
// empty models dir) has heard b's inventory but not a's (a's report is
// held back with the HoldInventory hook). A request to c for the model on
// a's disk is forwarded to a, not answered 404, because c asks the
// member it has not heard; a model no member has is a 404 once a has
// answered, and still one after a's inventory is in.
func TestNoEarly404(t *testing.T) {
	var holdA atomic.Bool
	holdA.Store(true)
	cfgA := nodetest.Member("a", 1, nil)
	cfgA.HoldInventory = holdA.Load
	a := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: nodetest.Models(t), Cluster: cfgA})
	join := []string{a.Cluster().GossipAddr()}
	nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: t.TempDir(), Cluster: nodetest.Member("b", 0, join)})
	c := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: t.TempDir(), Cluster: nodetest.Member("c", 0, join)})

	unheard := func(n *node.Node) []string {
		var ids []string
		for _, r := range n.Cluster().Unheard() {
			ids = append(ids, r.ID)
		}
		return ids
	}
	formed := func() bool {
		alive := 0
		for _, m := range c.Cluster().Members() {
			if m.Status == cluster.StatusAlive && m.InRaft {
				alive++
			}
		}
		return alive == 3
	}
	// waitUntil polls the cluster's state (not the clock).
	waitUntil(t, 20*time.Second, "the cluster formed and c heard b's inventory but not a's", func() bool {
		return formed() && slices.Equal(unheard(c), []string{"a"})
	})

	chat := func(n *node.Node, model string) (int, string, string) {
		t.Helper()
		body := `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"temperature":0}`
		resp := postChat(t, n, body)
		defer resp.Body.Close()
		var e struct{ Error struct{ Code string } }
		json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e.Error.Code, resp.Header.Get("X-Fusion-Node")
	}
	tests := []struct {
		name, model string
		status      int
		code        string
		servedBy    string
	}{
		{"model on a's disk", "demo", 200, "", "a"},
		{"model nowhere", "nope", 404, "model_not_found", ""},
	}
	check := func(phase string) {
		t.Helper()
		for _, tc := range tests {
			status, code, servedBy := chat(c, tc.model)
			if status != tc.status || code != tc.code || servedBy != tc.servedBy {
				t.Errorf("%s, %s: %d %q served by %q; want %d %q served by %q",
					phase, tc.name, status, code, servedBy, tc.status, tc.code, tc.servedBy)
			}
		}
	}
	check("a's inventory unheard")
	if len(unheard(c)) != 1 {
		t.Fatalf("a's inventory reached c while held: unheard %v", unheard(c))
	}

	holdA.Store(false)
	waitUntil(t, 20*time.Second, "c heard every inventory", func() bool { return len(unheard(c)) == 0 })
	check("every inventory heard")
}
