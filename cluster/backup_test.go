package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
)

// TestBackupRestore: a backup taken through a follower while writes go on
// holds every write acknowledged before it was asked for; restored into a
// new three-member cluster, every member has those writes, and keeps its
// own node catalog.
func TestBackupRestore(t *testing.T) {
	old := startCluster(t, 3, "s1")
	ctx := context.Background()

	// Steady writes from every member, each acknowledged one recorded.
	var (
		mu    sync.Mutex
		acked = map[string]time.Time{}
		stop  atomic.Bool
		wg    sync.WaitGroup
	)
	for i, m := range old {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; !stop.Load(); k++ {
				key := fmt.Sprintf("w/%d/%d", i, k)
				if _, err := put(ctx, m, key, key); err == nil {
					mu.Lock()
					acked[key] = time.Now()
					mu.Unlock()
				}
			}
		}()
	}
	// A session too: restored with the rest.
	if _, err := old[0].Apply(ctx, &pb.SessionCreate{Session: &pb.Session{Id: "sess-1", Model: "m"}, NowUnixNano: time.Now().UnixNano(), TtlNanos: int64(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)

	follower := old[0]
	if follower.IsLeader() {
		follower = old[1]
	}
	srv := httptest.NewServer(follower.AdminHandler())
	defer srv.Close()
	asked := time.Now()
	resp, err := http.Get(srv.URL + AdminPath + "/backup")
	if err != nil {
		t.Fatal(err)
	}
	var backup bytes.Buffer
	backup.ReadFrom(resp.Body)
	resp.Body.Close()
	stop.Store(true)
	wg.Wait()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != BackupContentType {
		t.Fatalf("backup: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), backup.String())
	}
	state, err := fsm.ReadState(bytes.NewReader(backup.Bytes()), 16)
	if err != nil {
		t.Fatal(err)
	}
	var before, in int
	mu.Lock()
	for key, at := range acked {
		_, ok := state.Setting(key)
		if at.Before(asked) {
			before++
			if !ok {
				t.Errorf("write %s acknowledged before the backup was asked for is not in it", key)
			}
		}
		if ok {
			in++
		}
	}
	mu.Unlock()
	if before < 10 {
		t.Fatalf("only %d writes before the backup: the test proves little", before)
	}
	t.Logf("backup of %d bytes: %d writes acknowledged before it was asked for, %d in it", backup.Len(), before, in)

	// A new cluster: restore through a follower is redirected to the leader.
	fresh := startCluster(t, 3, "s2")
	leader := waitLeader(t, fresh, 10*time.Second)
	// A restore keeps the node catalog it finds: wait until the leader's
	// holds all three members (under load their records trail the
	// election).
	waitFor(t, 10*time.Second, "the three members in the leader's catalog", func() bool {
		var n int
		leader.fsm.Read(func(s *fsm.State) { n = len(s.Nodes()) })
		return n == 3
	})
	var fol *Member
	for _, m := range fresh {
		if m != leader {
			fol = m
		}
	}
	fsrv := httptest.NewServer(fol.AdminHandler())
	defer fsrv.Close()
	resp, err = http.Post(fsrv.URL+AdminPath+"/restore", BackupContentType, bytes.NewReader(backup.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var redirect struct{ Leader string }
	json.NewDecoder(resp.Body).Decode(&redirect)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(redirect.Leader, leader.ID()) {
		t.Fatalf("restore on a follower: %d, leader %q (want %s's address)", resp.StatusCode, redirect.Leader, leader.ID())
	}
	// Each member's admin handler, so a restore that finds the leadership
	// moved (421: under load an election can follow the restore) is sent
	// again to the leader of the moment, as the CLI does.
	admin := map[*Member]*httptest.Server{}
	for _, m := range fresh {
		admin[m] = httptest.NewServer(m.AdminHandler())
		defer admin[m].Close()
	}
	for _, tc := range []struct {
		body   []byte
		query  string
		status int
	}{
		{[]byte("not a backup"), "", http.StatusBadRequest},
		{backup.Bytes(), "", http.StatusOK},
		{backup.Bytes(), "", http.StatusConflict}, // now it holds data
		{backup.Bytes(), "?force", http.StatusOK},
	} {
		var (
			resp *http.Response
			b    bytes.Buffer
		)
		for attempt := 0; ; attempt++ {
			srv := admin[waitLeader(t, fresh, 10*time.Second)]
			resp, err = http.Post(srv.URL+AdminPath+"/restore"+tc.query, BackupContentType, bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			b.Reset()
			b.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusMisdirectedRequest || attempt == 5 {
				break
			}
			t.Logf("restore %s: the leadership moved (%s), sending again", tc.query, b.String())
		}
		if resp.StatusCode != tc.status {
			t.Fatalf("restore %q%s: %d %s, want %d", tc.body[:min(len(tc.body), 12)], tc.query, resp.StatusCode, b.String(), tc.status)
		}
	}
	for _, m := range fresh {
		waitFor(t, 10*time.Second, m.ID()+" has the restored data", func() bool {
			ok := true
			m.fsm.Read(func(s *fsm.State) {
				for key, at := range acked {
					if _, has := s.Setting(key); at.Before(asked) && !has {
						ok = false
					}
				}
				if _, has := s.Session("sess-1", time.Now().UnixNano()); !has {
					ok = false
				}
			})
			return ok
		})
		m.fsm.Read(func(s *fsm.State) {
			var ids []string
			for _, n := range s.Nodes() {
				ids = append(ids, n.Id)
			}
			if strings.Join(ids, ",") != "n1,n2,n3" {
				t.Errorf("%s: node catalog %v after the restore", m.ID(), ids)
			}
		})
	}
	// Linearizable reads and writes still work after the restore.
	if _, err := put(ctx, fol, "after", "x"); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := fol.ConsistentRead(cctx); err != nil {
		t.Errorf("consistent read after the restore: %v", err)
	}
	waitSameState(t, fresh)
}
