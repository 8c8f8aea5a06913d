package cluster

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"
)

// TestKeyOnceAcrossMembers: without a secret, members asking for the same
// key at once all get the one proposal that committed; with a secret,
// the key is derived (no write) and equal on members of the same secret.
func TestKeyOnceAcrossMembers(t *testing.T) {
	nodes := startCluster(t, 3, "")
	waitLeader(t, nodes, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys := make([][]byte, len(nodes)*2)
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() { keys[i], errs[i] = nodes[i%len(nodes)].Key(ctx, "k") })
	}
	wg.Wait()
	for i := range keys {
		if errs[i] != nil || len(keys[i]) != KeyLen || !bytes.Equal(keys[i], keys[0]) {
			t.Fatalf("member %d: %x, %v (member 0: %x)", i%len(nodes), keys[i], errs[i], keys[0])
		}
	}
	other, err := nodes[0].Key(ctx, "other")
	if err != nil || bytes.Equal(other, keys[0]) {
		t.Errorf("another name: %x, %v", other, err)
	}

	a, b, c := NewAuth("s"), NewAuth("s"), NewAuth("t")
	if !bytes.Equal(a.key("k"), b.key("k")) || bytes.Equal(a.key("k"), c.key("k")) || bytes.Equal(a.key("k"), a.key("other")) {
		t.Error("derived keys: same secret and name must agree, another secret or name must not")
	}
}
