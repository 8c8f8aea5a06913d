package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "fusion/cluster/clusterpb"
)

// gen produces random but well-formed commands over a small key space so
// that creates, conflicts, CAS failures, duplicates and evictions all occur.
type gen struct {
	r    *rand.Rand
	now  int64
	rids []string
	// st, when set, is peeked to make half the CAS expectations right.
	st *State
}

func (g *gen) expectPlacement(model string, replica uint32) uint64 {
	if g.st != nil && g.r.IntN(2) == 0 {
		if p, ok := g.st.placements[PlacementKey(model, replica)]; ok {
			return p.ModifyIndex
		}
		return 0
	}
	return uint64(g.r.IntN(40))
}

func (g *gen) generation(model string, replica uint32) uint64 {
	if g.st != nil && g.r.IntN(2) == 0 {
		if p, ok := g.st.placements[PlacementKey(model, replica)]; ok {
			return p.Generation
		}
	}
	return uint64(g.r.IntN(40))
}

func (g *gen) turn(id string) uint64 {
	if g.st != nil && g.r.IntN(4) != 0 {
		if se, ok := g.st.sessions[id]; ok {
			return se.Turn
		}
	}
	return uint64(g.r.IntN(3))
}

func (g *gen) version(key string) uint64 {
	if g.st != nil && g.r.IntN(2) == 0 {
		if v, ok := g.st.settings[key]; ok {
			return v.Version
		}
		return 0
	}
	return uint64(g.r.IntN(30))
}

func (g *gen) pick(prefix string, n int) string { return fmt.Sprintf("%s%d", prefix, g.r.IntN(n)) }

func (g *gen) rid() string {
	if len(g.rids) > 0 && g.r.IntN(8) == 0 {
		return g.rids[g.r.IntN(len(g.rids))] // a retried request
	}
	if g.r.IntN(4) == 0 {
		return ""
	}
	id := fmt.Sprintf("r%d", g.r.Int64())
	g.rids = append(g.rids, id)
	return id
}

func (g *gen) next() []byte {
	g.now += int64(g.r.IntN(3)) * 2e8
	var m proto.Message
	sec := int64(1e9)
	switch g.r.IntN(21) {
	case 0:
		m = &pb.NodeUpsert{Node: &pb.Node{Id: g.pick("n", 4), HttpAddr: g.pick("h", 3)}, NowUnixNano: g.now}
	case 1:
		m = &pb.NodeSetStatus{Id: g.pick("n", 4), Status: pb.NodeStatus(1 + g.r.IntN(3)), NowUnixNano: g.now}
	case 2:
		m = &pb.NodeDeregister{Id: g.pick("n", 5)}
	case 3:
		if g.r.IntN(2) == 0 {
			m = &pb.NodeSetInventory{Id: g.pick("n", 4), Inventory: []byte(fmt.Sprintf(`{"loaded":["m%d"]}`, g.r.IntN(3)))}
			break
		}
		m = &pb.NodeSetDraining{Id: g.pick("n", 4), Draining: g.r.IntN(2) == 0}
	case 4:
		p := &pb.Placement{Model: g.pick("m", 3), Replica: uint32(g.r.IntN(2))}
		if g.r.IntN(2) == 0 {
			p.Stages = []*pb.Stage{{Node: g.pick("n", 4)}}
		} else {
			cut := uint32(1 + g.r.IntN(10))
			p.NumLayers = 12
			p.Stages = []*pb.Stage{{Node: g.pick("n", 4), LayerStart: 0, LayerEnd: cut}, {Node: g.pick("n", 4), LayerStart: cut + uint32(g.r.IntN(2)), LayerEnd: 12}}
		}
		m = &pb.PlacementPut{Placement: p, ExpectIndex: g.expectPlacement(p.Model, p.Replica)}
	case 5:
		model, replica := g.pick("m", 3), uint32(g.r.IntN(2))
		m = &pb.PlacementSetState{Model: model, Replica: replica, Generation: g.generation(model, replica), Node: g.pick("n", 4), State: pb.StageState(1 + g.r.IntN(6))}
	case 6:
		model, replica := g.pick("m", 3), uint32(g.r.IntN(2))
		m = &pb.PlacementDelete{Model: model, Replica: replica, Generation: g.generation(model, replica)}
	case 7, 8:
		m = &pb.SessionCreate{Session: &pb.Session{Id: g.pick("s", 12), Model: "m0", History: []byte(`[{"role":"user","content":"hi"}]`),
			ExpiresUnixNano: g.now + int64(1+g.r.IntN(20))*sec}, NowUnixNano: g.now, MaxSessions: 5, Policy: pb.CapPolicy(g.r.IntN(2))}
	case 9:
		m = &pb.SessionTouch{Id: g.pick("s", 12), NowUnixNano: g.now, ExpiresUnixNano: g.now + int64(g.r.IntN(20))*sec}
	case 10:
		id := g.pick("s", 12)
		m = &pb.SessionTurnBegin{Id: id, ExpectTurn: g.turn(id), NowUnixNano: g.now, ExpiresUnixNano: g.now + 10*sec, HistoryAppend: []byte(`[{"role":"user","content":"q"}]`)}
	case 11:
		id := g.pick("s", 12)
		m = &pb.SessionTurnEnd{Id: id, Turn: g.turn(id), HistoryAppend: []byte(`[{"role":"assistant","content":"a"}]`), Aborted: g.r.IntN(5) == 0, NowUnixNano: g.now}
	case 12:
		id := g.pick("s", 12)
		t := g.turn(id)
		m = &pb.SessionUpdate{Id: id, ExpectTurn: &t, SetSystemPrompt: true, SystemPrompt: g.pick("p", 9), NowUnixNano: g.now}
	case 13:
		m = &pb.SessionDestroy{Id: g.pick("s", 12)}
	case 14:
		m = &pb.SessionReap{NowUnixNano: g.now}
	case 15:
		m = &pb.APIKeyPut{Key: &pb.APIKey{Id: g.pick("k", 3), Hash: []byte{byte(g.r.IntN(256))}, Scopes: []string{"inference"}}}
	case 16:
		m = &pb.APIKeyRevoke{Id: g.pick("k", 3), NowUnixNano: g.now}
	case 17:
		if g.r.IntN(10) == 0 {
			return []byte{byte(IgnoreUnknown | 0x7e), 1, 2, 3} // a future optional command
		}
		key := g.pick("k", 3)
		m = &pb.SettingPut{Key: key, Value: []byte(g.pick("v", 100)), Cas: g.r.IntN(2) == 0, ExpectVersion: g.version(key)}
	case 18:
		m = &pb.PanelSessionPut{Session: &pb.PanelSession{Hash: panelHash(g.pick("ps", 8)), CreatedUnixNano: g.now,
			ExpiresUnixNano: g.now + int64(1+g.r.IntN(20))*sec}, NowUnixNano: g.now, MaxSessions: uint32(g.r.IntN(5))}
	case 19:
		m = &pb.PanelSessionEnd{Hash: panelHash(g.pick("ps", 8))}
	case 20:
		switch g.r.IntN(4) {
		case 0, 1:
			states := []string{JobQueued, JobRunning, JobDone, JobFailed, JobCancelled}
			m = &pb.JobPut{Job: &pb.Job{Id: g.pick("j", 5), Kind: "download", Node: g.pick("n", 2), State: states[g.r.IntN(len(states))],
				CreatedUnixNano: g.now, UpdatedUnixNano: g.now, Unit: "bytes", Done: int64(g.r.IntN(100)), Total: 100}}
		case 2:
			m = &pb.JobDelete{Id: g.pick("j", 5)}
		default:
			m = &pb.JobsInterrupt{Node: g.pick("n", 2), UnixNano: g.now}
		}
	}
	SetRequestID(m, g.rid())
	b, err := Encode(m)
	if err != nil {
		panic(err)
	}
	return b
}

func encodeState(t *testing.T, s *State) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := s.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func restore(t *testing.T, snap []byte, dedup int) *State {
	t.Helper()
	s, err := ReadState(bytes.NewReader(snap), dedup)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPropertyReplayEqualsSnapshot: for random command logs, applying
// directly, replaying the log into a fresh state, and snapshotting half
// way then restoring and applying the rest give byte-identical state.
func TestPropertyReplayEqualsSnapshot(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			g := &gen{r: rand.New(rand.NewPCG(seed, seed*7919))}
			const dedup = 64 // small, so the ring wraps
			n := 200 + g.r.IntN(400)
			half := g.r.IntN(n)
			a := NewState(dedup)
			g.st = a
			log := make([][]byte, n)
			var results []Result
			var halfSnap []byte
			for i := range log {
				log[i] = g.next()
				cmd := log[i]
				results = append(results, a.Apply(uint64(i+1), cmd))
				if i+1 == half {
					halfSnap = encodeState(t, a)
				}
			}
			if half == 0 {
				halfSnap = encodeState(t, NewState(dedup))
			}

			c := NewState(dedup)
			for i, cmd := range log {
				r := c.Apply(uint64(i+1), cmd)
				if fmt.Sprint(r.Err, r.Value, r.Ref, r.Duplicate) != fmt.Sprint(results[i].Err, results[i].Value, results[i].Ref, results[i].Duplicate) {
					t.Fatalf("replay result %d differs: %+v vs %+v", i+1, r, results[i])
				}
			}

			b := restore(t, halfSnap, dedup)
			for i := half; i < n; i++ {
				r := b.Apply(uint64(i+1), log[i])
				if fmt.Sprint(r.Err, r.Value, r.Ref, r.Duplicate) != fmt.Sprint(results[i].Err, results[i].Value, results[i].Ref, results[i].Duplicate) {
					t.Fatalf("after restore at %d, result %d differs: %+v vs %+v", half, i+1, r, results[i])
				}
			}

			want := encodeState(t, a)
			if got := encodeState(t, c); !bytes.Equal(got, want) {
				t.Fatal("log replay differs from direct apply")
			}
			if got := encodeState(t, b); !bytes.Equal(got, want) {
				t.Fatalf("snapshot at %d + rest differs from direct apply", half)
			}
			if got := encodeState(t, restore(t, want, dedup)); !bytes.Equal(got, want) {
				t.Fatal("snapshot round trip is not the identity")
			}
			checkInvariants(t, a)
		})
	}
}

func checkInvariants(t *testing.T, s *State) {
	t.Helper()
	for _, p := range s.placements {
		if p.Generation == 0 || p.ModifyIndex < p.Generation {
			t.Errorf("placement %s: generation %d modify %d", p.Model, p.Generation, p.ModifyIndex)
		}
		if p.NumLayers > 0 {
			var next uint32
			for _, st := range p.Stages {
				if st.LayerStart != next {
					t.Errorf("placement %s: stored with a gap or overlap at %d", p.Model, st.LayerStart)
				}
				next = st.LayerEnd
			}
			if next != p.NumLayers {
				t.Errorf("placement %s: stored with uncovered layers", p.Model)
			}
		}
	}
	if len(s.dedup) != len(s.dedupRing) || len(s.dedup) > s.dedupSize {
		t.Errorf("dedup table %d entries, ring %d, size %d", len(s.dedup), len(s.dedupRing), s.dedupSize)
	}
}

// TestPropertySessionInvariants: under random session traffic the live
// count never exceeds the cap and expiry never moves backwards.
func TestPropertySessionInvariants(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		g := &gen{r: rand.New(rand.NewPCG(seed, 1))}
		s := NewState(0)
		g.st = s
		expiry := map[string]int64{}
		for i := 1; i <= 2000; i++ {
			cmd := g.next()
			typ, m, _ := Decode(cmd)
			s.Apply(uint64(i), cmd)
			now := g.now
			live := 0
			for id, se := range s.sessions {
				if se.ExpiresUnixNano > now {
					live++
				}
				if old, ok := expiry[id]; ok && se.CreateIndex < uint64(i) && se.ExpiresUnixNano < old {
					t.Fatalf("seed %d: session %s expiry moved back from %d to %d by %T", seed, id, old, se.ExpiresUnixNano, m)
				}
				expiry[id] = se.ExpiresUnixNano
			}
			if typ == TypeSessionCreate && live > 5 {
				t.Fatalf("seed %d: %d live sessions, cap 5", seed, live)
			}
			for id := range expiry {
				if se, ok := s.sessions[id]; !ok || se.CreateIndex == uint64(i) {
					delete(expiry, id)
					if ok {
						expiry[id] = se.ExpiresUnixNano
					}
				}
			}
		}
	}
}
