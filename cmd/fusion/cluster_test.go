package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"fusion/cluster"
	pb "fusion/cluster/clusterpb"
)

func TestClusterStatus(t *testing.T) {
	m, err := cluster.New(cluster.Config{NodeID: "solo", DataDir: t.TempDir(), GossipListen: "127.0.0.1:0",
		RaftListen: "127.0.0.1:0", GRPCListen: "127.0.0.1:0", HTTPAdvertise: "http://solo:8000", Timing: cluster.TestTiming()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := m.Apply(ctx, &pb.PlacementPut{Placement: &pb.Placement{Model: "qwen", Stages: []*pb.Stage{{Node: "solo"}}}}); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/api/cluster", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, `{"error":{"message":"unauthorized"}}`, http.StatusUnauthorized)
			return
		}
		m.AdminHandler().ServeHTTP(w, r)
	}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"table", []string{"cluster", "status", "--addr", srv.URL, "--api-key", "k"}, 0,
			[]string{"self solo, leader solo", "solo", "alive", "leader", "http://solo:8000", "qwen", "solo assigned"}},
		{"consistent", []string{"cluster", "status", "--addr", srv.URL, "--api-key", "k", "--consistent"}, 0, []string{"leader solo"}},
		{"no key", []string{"cluster", "status", "--addr", srv.URL}, 1, nil},
		{"no sub-command", []string{"cluster"}, 2, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(ctx, tc.args, &out, &errb); code != tc.code {
				t.Fatalf("exit %d, want %d: %s", code, tc.code, errb.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Fatalf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
	var out bytes.Buffer
	if code := run(ctx, []string{"cluster", "status", "--addr", srv.URL, "--api-key", "k", "--json"}, &out, &out); code != 0 {
		t.Fatal(out.String())
	}
	var doc cluster.StatusDoc
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil || doc.Self != "solo" || len(doc.Members) != 1 || !doc.Members[0].Voter {
		t.Fatalf("json: %v %+v", err, doc)
	}
}
