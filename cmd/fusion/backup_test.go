package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fusion/cluster"
	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
)

// soloMember starts a one-member cluster and serves its admin API behind
// the key "k".
func soloMember(t *testing.T, id string) (*cluster.Member, string) {
	t.Helper()
	m, err := cluster.New(cluster.Config{NodeID: id, DataDir: t.TempDir(), GossipListen: "127.0.0.1:0",
		RaftListen: "127.0.0.1:0", GRPCListen: "127.0.0.1:0", HTTPAdvertise: "http://" + id, Timing: cluster.TestTiming()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Leading, and its own record in the node catalog (a restore keeps
	// the catalog it finds).
	inCatalog := func() (in bool) {
		m.FSM().Read(func(s *fsm.State) {
			for _, n := range s.Nodes() {
				in = in || n.Id == id
			}
		})
		return in
	}
	for deadline := time.Now().Add(10 * time.Second); !m.IsLeader() || !inCatalog(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no leader, or %s not in the catalog", id)
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, `{"error":{"message":"unauthorized"}}`, http.StatusUnauthorized)
			return
		}
		m.AdminHandler().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return m, srv.URL
}

// TestClusterBackupRestoreCommands: fusion cluster backup writes a file
// that fusion cluster restore brings back into another cluster; a cluster
// with data refuses without --force.
func TestClusterBackupRestoreCommands(t *testing.T) {
	ctx := context.Background()
	a, aURL := soloMember(t, "a")
	for _, k := range []string{"x", "y"} {
		if _, err := a.Apply(ctx, &pb.SettingPut{Key: "setting/" + k, Value: []byte(k)}); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(t.TempDir(), "cluster.fsb")
	if out := fusion(t, "cluster", "backup", "--addr", aURL, "--api-key", "k", file); !strings.Contains(out, "wrote "+file) {
		t.Errorf("backup printed %q", out)
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v %v", st, err)
	}

	b, bURL := soloMember(t, "b")
	fusion(t, "cluster", "restore", "--addr", bURL, "--api-key", "k", file)
	b.FSM().Read(func(s *fsm.State) {
		for _, k := range []string{"x", "y"} {
			if v, ok := s.Setting("setting/" + k); !ok || string(v.Value) != k {
				t.Errorf("setting/%s after the restore: %v %v", k, v, ok)
			}
		}
		if n := s.Nodes(); len(n) != 1 || n[0].Id != "b" {
			t.Errorf("node catalog after the restore: %v", n)
		}
	})

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"cluster", "restore", "--addr", bURL, "--api-key", "k", file}, 1, "409"},
		{[]string{"cluster", "restore", "--addr", bURL, "--api-key", "k", "--force", file}, 0, ""},
		{[]string{"cluster", "restore", "--addr", bURL, "--api-key", "k", "--force", os.Args[0]}, 1, "not a fusion backup"},
		{[]string{"cluster", "backup", "--addr", aURL, file}, 1, "401"},
		{[]string{"cluster", "backup", "--addr", aURL}, 2, "give the backup file"},
		{[]string{"cluster", "restore", "--addr", bURL, "--api-key", "k", filepath.Join(t.TempDir(), "none")}, 1, "no such file"},
	} {
		var out, errb strings.Builder
		if code := run(ctx, tc.args, &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d: %s, want %d %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
}
