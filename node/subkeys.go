package node

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"fusion/cluster"
	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
	"fusion/cluster/keyusage"
	"fusion/router/auth"
)

// raftKeys is the sub-key store of a cluster member: the key records
// (hashes only) live in the replicated state; an index by hash is rebuilt
// on this node whenever the log changes a key, so a lookup is a map read
// and a revocation applied here is in force for the next request.
type raftKeys struct {
	m      *cluster.Member
	idx    atomic.Pointer[map[[sha256.Size]byte]auth.Key]
	cancel func()
}

func newRaftKeys(m *cluster.Member) *raftKeys {
	k := &raftKeys{m: m}
	k.cancel = m.FSM().Subscribe(func(ch []fsm.Change) {
		for _, c := range ch {
			if c.Table == fsm.TableAPIKeys || c.Kind == fsm.Reset {
				k.rebuild()
				return
			}
		}
	})
	k.rebuild()
	return k
}

// Close stops following the log.
func (k *raftKeys) Close() { k.cancel() }

func (k *raftKeys) rebuild() {
	var recs []*pb.APIKey
	k.m.FSM().Read(func(s *fsm.State) { recs = s.APIKeys() })
	idx := make(map[[sha256.Size]byte]auth.Key, len(recs))
	for _, r := range recs {
		if len(r.Hash) != sha256.Size {
			continue
		}
		key := fromPB(r)
		idx[key.Hash] = key
	}
	k.idx.Store(&idx)
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromPB(r *pb.APIKey) auth.Key {
	k := auth.Key{ID: r.Id, Name: r.Name, Prefix: r.Prefix, Models: r.Models,
		RequestsPerMin: r.RequestsPerMin, TokensPerMin: r.TokensPerMin,
		Created: unixTime(r.CreatedUnixNano), Expires: unixTime(r.ExpiresUnixNano), Revoked: unixTime(r.RevokedUnixNano)}
	copy(k.Hash[:], r.Hash)
	for _, s := range r.Scopes {
		k.Scopes = append(k.Scopes, auth.Scope(s))
	}
	return k
}

func toPB(k auth.Key) *pb.APIKey {
	r := &pb.APIKey{Id: k.ID, Name: k.Name, Prefix: k.Prefix, Hash: k.Hash[:], Models: k.Models,
		RequestsPerMin: k.RequestsPerMin, TokensPerMin: k.TokensPerMin,
		CreatedUnixNano: unixNano(k.Created), ExpiresUnixNano: unixNano(k.Expires)}
	for _, s := range k.Scopes {
		r.Scopes = append(r.Scopes, string(s))
	}
	return r
}

// Lookup implements auth.Store.
func (k *raftKeys) Lookup(hash [sha256.Size]byte) (auth.Key, bool) {
	key, ok := (*k.idx.Load())[hash]
	return key, ok
}

// List implements auth.Store.
func (k *raftKeys) List() []auth.Key {
	var recs []*pb.APIKey
	k.m.FSM().Read(func(s *fsm.State) { recs = s.APIKeys() })
	out := make([]auth.Key, 0, len(recs))
	for _, r := range recs {
		if r.RevokedUnixNano == 0 {
			out = append(out, fromPB(r))
		}
	}
	return out
}

// Put implements auth.Store: a write through the leader, waited for here.
func (k *raftKeys) Put(ctx context.Context, key auth.Key) error {
	res, err := k.m.Apply(ctx, &pb.APIKeyPut{Key: toPB(key)})
	if err != nil {
		return fmt.Errorf("node: store sub-key: %w", err)
	}
	return k.m.FSM().WaitApplied(ctx, res.Index)
}

// Revoke implements auth.Store.
func (k *raftKeys) Revoke(ctx context.Context, id string, now time.Time) error {
	live := false
	k.m.FSM().Read(func(s *fsm.State) {
		for _, r := range s.APIKeys() {
			if r.Id == id {
				live = r.RevokedUnixNano == 0
			}
		}
	})
	if !live {
		return auth.ErrNotFound
	}
	res, err := k.m.Apply(ctx, &pb.APIKeyRevoke{Id: id, NowUnixNano: now.UnixNano()})
	var fe *fsm.Error
	if errors.As(err, &fe) && fe.Code == fsm.CodeNotFound {
		return auth.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("node: revoke sub-key: %w", err)
	}
	return k.m.FSM().WaitApplied(ctx, res.Index)
}

// DefaultKeyUsageInterval is how often a member asks each peer for its
// sub-keys' usage (the rate limits' cluster-wide tolerance is what the
// other nodes admit within one interval plus a call).
const DefaultKeyUsageInterval = 250 * time.Millisecond

// registerKeyUsage serves this node's sub-key usage to its peers.
func (n *Node) registerKeyUsage() {
	keyusage.Register(n.member.GRPCServer(), func() []byte {
		b, _ := json.Marshal(n.keyLimits.Report())
		return b
	})
}

// followKeyUsage asks every live peer for its report each interval, until
// ctx ends; a peer that left is forgotten.
func (n *Node) followKeyUsage(ctx context.Context, wg *sync.WaitGroup) {
	interval := n.cfg.KeyUsageInterval
	if interval <= 0 {
		interval = DefaultKeyUsageInterval
	}
	defer wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	known := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		live := map[string]bool{}
		var wg sync.WaitGroup
		for _, p := range n.member.Members() {
			if p.ID == n.member.ID() || p.GRPC == "" || p.Status != cluster.StatusAlive {
				continue
			}
			live[p.ID] = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				cl, err := n.pool.Client(p.GRPC)
				if err != nil {
					n.cfg.Logger.Debug("key usage: peer", "peer", p.ID, "err", err)
					return
				}
				cctx, cancel := context.WithTimeout(ctx, max(2*interval, time.Second))
				defer cancel()
				b, err := keyusage.Fetch(cctx, cl.Conn())
				var r auth.Report
				if err == nil {
					err = json.Unmarshal(b, &r)
				}
				if err != nil {
					n.cfg.Logger.Debug("key usage: peer report", "peer", p.ID, "err", err)
					return
				}
				n.keyLimits.SetPeer(p.ID, r)
			}()
		}
		wg.Wait()
		for id := range known {
			if !live[id] {
				n.keyLimits.DropPeer(id)
			}
		}
		known = live
	}
}
