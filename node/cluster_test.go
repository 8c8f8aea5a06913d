package node_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"fusion/cluster"
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

// TestClusteredNodes: two nodes with cluster settings form a cluster,
// /admin/api/cluster lists both with their HTTP and gRPC addresses, and a
// stopped node leaves it gracefully. A node without cluster settings has
// no cluster route.
func TestClusteredNodes(t *testing.T) {
	loopback := func(id string, expect int, join []string) node.ClusterConfig {
		return node.ClusterConfig{NodeID: id, Listen: "127.0.0.1:0", RaftListen: "127.0.0.1:0", GRPCListen: "127.0.0.1:0",
			BootstrapExpect: expect, Join: join, Secret: "s", Timing: cluster.TestTiming()}
	}
	models := nodetest.Models(t)
	a := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Cluster: loopback("a", 1, nil)})
	b := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Cluster: loopback("b", 0, []string{a.Cluster().GossipAddr()})})

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
