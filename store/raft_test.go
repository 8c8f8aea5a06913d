package store

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestOpenRaftPersistsAndLocks(t *testing.T) {
	dir := t.TempDir()
	r, err := OpenRaft(dir, RaftOptions{})
	if err != nil {
		t.Fatal(err)
	}
	logs := []*raft.Log{{Index: 1, Term: 1, Data: []byte("a")}, {Index: 2, Term: 1, Data: []byte("b")}}
	if err := r.Log.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := r.Stable.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	// A second opener (another process) times out instead of hanging.
	if _, err := OpenRaft(dir, RaftOptions{OpenTimeout: 50 * time.Millisecond}); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("second open: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r, err = OpenRaft(dir, RaftOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	last, _ := r.Log.LastIndex()
	term, _ := r.Stable.GetUint64([]byte("CurrentTerm"))
	var l raft.Log
	if err := r.Log.GetLog(2, &l); err != nil || last != 2 || term != 7 || string(l.Data) != "b" {
		t.Fatalf("reopened: last %d term %d entry %q err %v", last, term, l.Data, err)
	}
}
