package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"fusion/cluster"
	"fusion/node"
	"fusion/node/nodetest"
)

func drainRecord(t *testing.T, url, id string) cluster.DrainRecord {
	t.Helper()
	code, b := keyAdminDo(t, http.MethodGet, url+"/admin/api/cluster/nodes/"+id+"/drain", "")
	var rec cluster.DrainRecord
	if code != http.StatusOK || json.Unmarshal(b, &rec) != nil {
		t.Fatalf("drain record of %s: %d %s", id, code, b)
	}
	return rec
}

// TestClusterDrain: a 3-node cluster under steady chat load from clients
// of every node; the leader, which holds a replica of the model and runs
// a long stream, is drained through another node. Its stream finishes
// first, then the record says drained; by then it leads no more, holds no
// placement (the planner moved its replica), answers /health?ready 503,
// and its peers route nothing to it. No request fails at any time.
// Undrain puts it back among the routes.
func TestClusterDrain(t *testing.T) {
	models := nodetest.Models(t)
	a := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Cluster: nodetest.Member("a", 3, nil)})
	join := []string{a.Cluster().GossipAddr()}
	b := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Cluster: nodetest.Member("b", 3, join)})
	c := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Cluster: nodetest.Member("c", 3, join)})
	nodes := map[string]*node.Node{"a": a, "b": b, "c": c}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var leader string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, doc := clusterDoc(t, a.URL(), "k")
		voters := 0
		for _, m := range doc.Members {
			if m.Voter && m.Status == cluster.StatusAlive {
				voters++
			}
		}
		if code == 200 && doc.Leader != "" && voters == 3 {
			leader = doc.Leader
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 3-voter cluster: %d %+v", code, doc)
		}
	}
	victim := nodes[leader]
	// Two replicas, one on the leader.
	if err := a.Cluster().SetPlacementSpec(ctx, nodetest.Model, cluster.PlacementSpec{Replicas: 2, Pin: []string{leader}}); err != nil {
		t.Fatal(err)
	}
	placedOn := func() []string {
		var on []string
		for _, p := range a.Cluster().Placements() {
			for _, st := range p.Stages {
				on = append(on, st.Node+"/"+st.State.String())
			}
		}
		slices.Sort(on)
		return on
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		on := placedOn()
		if len(on) == 2 && slices.Contains(on, leader+"/STAGE_STATE_READY") && strings.Count(strings.Join(on, " "), "READY") == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas not ready: %v", on)
		}
	}

	// A long stream on the leader, running while it drains.
	bias := noEOSBias(t, victim.URL(), "k")
	long := `{"model":"demo","messages":[{"role":"user","content":"a long answer"}],"max_tokens":300,"stream":true,"stream_options":{"include_usage":true},"logit_bias":` + bias + `}`
	var stream *http.Response
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		stream = postChat(t, victim, long)
		if stream.Header.Get("X-Fusion-Node") == leader {
			break
		}
		io.Copy(io.Discard, stream.Body)
		stream.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("the leader does not serve its own replica")
		}
	}
	sc := bufio.NewScanner(stream.Body)
	sc.Scan() // running on the leader
	streamDone := make(chan time.Time, 1)
	go func() {
		defer stream.Body.Close()
		last, finish, tokens := readChatStream(sc)
		if last != "data: [DONE]" || finish != "length" || tokens != 300 {
			t.Errorf("stream cut by the drain: finish %q after %d tokens, last %q", finish, tokens, last)
		}
		streamDone <- time.Now()
	}()

	// Steady load from clients of every node (the drained one's included:
	// it forwards what it no longer runs).
	var (
		sent, failed atomic.Int64
		servedMu     sync.Mutex
		servedAfter  = map[string]int{} // served by, after the drained state was seen
		drainedSeen  atomic.Bool
		wg           sync.WaitGroup
	)
	loadCtx, stopLoad := context.WithCancel(ctx)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			target := []*node.Node{a, b, c}[i%3]
			body := fmt.Sprintf(`{"model":"demo","messages":[{"role":"user","content":"load %d"}],"max_tokens":4}`, i)
			for loadCtx.Err() == nil {
				req, _ := http.NewRequestWithContext(loadCtx, http.MethodPost, target.URL()+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer k")
				after := drainedSeen.Load()
				resp, err := http.DefaultClient.Do(req)
				if loadCtx.Err() != nil {
					return
				}
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					t.Errorf("load request: %v", err)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
					t.Errorf("load request on %s: %d %s", target.URL(), resp.StatusCode, b)
					continue
				}
				if after {
					servedMu.Lock()
					servedAfter[resp.Header.Get("X-Fusion-Node")]++
					servedMu.Unlock()
				}
			}
		}()
	}

	other := a
	if leader == "a" {
		other = b
	}
	time.Sleep(500 * time.Millisecond)
	code, body := keyAdminDo(t, http.MethodPost, other.URL()+"/admin/api/cluster/nodes/"+leader+"/drain", "")
	if code != http.StatusAccepted {
		t.Fatalf("drain: %d %s", code, body)
	}
	var rec cluster.DrainRecord
	if err := json.Unmarshal(body, &rec); err != nil || !rec.Drain || rec.State != cluster.DrainStateDraining || rec.Node != leader {
		t.Fatalf("drain answer: %s (%v)", body, err)
	}
	var drainedAt time.Time
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if rec := drainRecord(t, other.URL(), leader); rec.State == cluster.DrainStateDrained {
			drainedAt = time.Now()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained: %+v, placements %v", drainRecord(t, other.URL(), leader), placedOn())
		}
	}
	select {
	case done := <-streamDone:
		if done.After(drainedAt) {
			t.Errorf("drained at %v before its stream ended at %v", drainedAt, done)
		}
	default:
		t.Errorf("drained while its stream still runs")
	}
	drainedSeen.Store(true)
	if l := victim.Cluster().Leader(); l == leader || l == "" {
		t.Errorf("leader after the drain: %q", l)
	}
	for _, on := range placedOn() {
		if strings.HasPrefix(on, leader+"/") {
			t.Errorf("a placement is still on the drained node: %v", placedOn())
		}
	}
	if code, body := keyAdminDo(t, http.MethodGet, victim.URL()+"/health?ready", ""); code != http.StatusServiceUnavailable || !strings.Contains(string(body), `"draining":true`) {
		t.Errorf("/health?ready of the drained node: %d %s", code, body)
	}
	if code, _ := keyAdminDo(t, http.MethodGet, victim.URL()+"/health", ""); code != http.StatusOK {
		t.Errorf("/health (liveness) of the drained node: %d", code)
	}
	time.Sleep(2 * time.Second) // load on the drained cluster
	stopLoad()
	wg.Wait()
	servedMu.Lock()
	if servedAfter[leader] > 0 || len(servedAfter) == 0 {
		t.Errorf("served after the drain: %v (none may be %s)", servedAfter, leader)
	}
	servedMu.Unlock()
	t.Logf("%d load requests, %d failed; served after the drain: %v", sent.Load(), failed.Load(), servedAfter)
	if sent.Load() == 0 || failed.Load() > 0 {
		t.Fatalf("%d of %d requests failed", failed.Load(), sent.Load())
	}

	// Undrain: back in the routes.
	if code, body := keyAdminDo(t, http.MethodPost, other.URL()+"/admin/api/cluster/nodes/"+leader+"/undrain", ""); code != http.StatusAccepted {
		t.Fatalf("undrain: %d %s", code, body)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		routes, _ := other.Cluster().Routes(nodetest.Model)
		back := slices.ContainsFunc(routes, func(r cluster.Route) bool { return r.ID == leader })
		code, _ := keyAdminDo(t, http.MethodGet, victim.URL()+"/health?ready", "")
		if back && code == http.StatusOK && !drainRecord(t, other.URL(), leader).Drain {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("undrained node not routed again: routes %v, ready %d", routes, code)
		}
	}
	// Bad input: an unknown node, an unknown action, a body with an
	// unknown field.
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{http.MethodPost, "/admin/api/cluster/nodes/nope/drain", "", http.StatusNotFound},
		{http.MethodPost, "/admin/api/cluster/nodes/" + leader + "/explode", "", http.StatusNotFound},
		{http.MethodPost, "/admin/api/cluster/nodes/" + leader + "/drain", `{"bogus":1}`, http.StatusBadRequest},
		{http.MethodGet, "/admin/api/cluster/nodes/" + leader + "/undrain", "", http.StatusMethodNotAllowed},
	} {
		if code, body := keyAdminDo(t, tc.method, other.URL()+tc.path, tc.body); code != tc.want {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, code, body, tc.want)
		}
	}
}
