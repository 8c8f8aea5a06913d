package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "fusion/cluster/clusterpb"
)

const sec = int64(1e9)

// harness applies commands at increasing indexes.
type harness struct {
	t   *testing.T
	s   *State
	idx uint64
}

func newHarness(t *testing.T) *harness { return &harness{t: t, s: NewState(0)} }

func (h *harness) apply(m proto.Message) Result {
	h.t.Helper()
	b, err := Encode(m)
	if err != nil {
		h.t.Fatal(err)
	}
	h.idx++
	return h.s.Apply(h.idx, b)
}

func (h *harness) ok(m proto.Message) Result {
	h.t.Helper()
	r := h.apply(m)
	if r.Err != nil {
		h.t.Fatalf("%T: %v", m, r.Err)
	}
	return r
}

func (h *harness) nodes(ids ...string) {
	for _, id := range ids {
		h.ok(&pb.NodeUpsert{Node: &pb.Node{Id: id}})
	}
}

func TestPlacementCoverage(t *testing.T) {
	st := func(node string, a, b uint32) *pb.Stage { return &pb.Stage{Node: node, LayerStart: a, LayerEnd: b} }
	tests := []struct {
		name   string
		layers uint32
		stages []*pb.Stage
		want   error
	}{
		{"whole model", 0, []*pb.Stage{{Node: "a"}}, nil},
		{"unsharded with two stages", 0, []*pb.Stage{{Node: "a"}, {Node: "b"}}, ErrInvalid},
		{"two stages in order", 32, []*pb.Stage{st("a", 0, 16), st("b", 16, 32)}, nil},
		{"two stages reversed", 32, []*pb.Stage{st("b", 16, 32), st("a", 0, 16)}, nil},
		{"gap", 32, []*pb.Stage{st("a", 0, 15), st("b", 16, 32)}, ErrInvalid},
		{"overlap", 32, []*pb.Stage{st("a", 0, 17), st("b", 16, 32)}, ErrInvalid},
		{"not starting at zero", 32, []*pb.Stage{st("a", 1, 16), st("b", 16, 32)}, ErrInvalid},
		{"short of the end", 32, []*pb.Stage{st("a", 0, 16), st("b", 16, 31)}, ErrInvalid},
		{"past the end", 32, []*pb.Stage{st("a", 0, 16), st("b", 16, 33)}, ErrInvalid},
		{"empty range", 32, []*pb.Stage{st("a", 0, 0), st("b", 0, 32)}, ErrInvalid},
		{"no stages", 32, nil, ErrInvalid},
		{"unknown node", 0, []*pb.Stage{{Node: "zz"}}, ErrInvalid},
		{"failed node", 0, []*pb.Stage{{Node: "dead"}}, ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.nodes("a", "b", "dead")
			h.ok(&pb.NodeSetStatus{Id: "dead", Status: pb.NodeStatus_NODE_STATUS_FAILED})
			r := h.apply(&pb.PlacementPut{Placement: &pb.Placement{Model: "m", NumLayers: tc.layers, Stages: tc.stages}})
			if !errors.Is(r.Err, tc.want) && !(tc.want == nil && r.Err == nil) {
				t.Fatalf("err = %v, want %v", r.Err, tc.want)
			}
			_, stored := h.s.placements[PlacementKey("m", 0)]
			if stored != (tc.want == nil) {
				t.Fatalf("stored = %v after err %v", stored, r.Err)
			}
			if tc.want == nil {
				p := h.s.placements[PlacementKey("m", 0)]
				if p.Generation != h.idx || p.Stages[0].State != pb.StageState_STAGE_STATE_ASSIGNED || p.Stages[0].LayerStart != 0 {
					t.Fatalf("stored %v", p)
				}
			}
		})
	}
}

func TestPlacementCASAndFencing(t *testing.T) {
	h := newHarness(t)
	h.nodes("a", "b")
	put := func(expect uint64, node string) Result {
		return h.apply(&pb.PlacementPut{Placement: &pb.Placement{Model: "m", Stages: []*pb.Stage{{Node: node}}}, ExpectIndex: expect})
	}
	r1 := put(0, "a")
	if r1.Err != nil || r1.Value != r1.Index {
		t.Fatalf("create: %+v", r1)
	}
	gen1 := r1.Value
	// A second creator that also expected "absent" loses, and learns the index.
	r := put(0, "b")
	var fe *Error
	if !errors.As(r.Err, &fe) || fe.Code != CodeConflict || fe.CurrentIndex != gen1 {
		t.Fatalf("second create: %+v", r)
	}
	// Node a reports Ready for generation 1.
	h.ok(&pb.PlacementSetState{Model: "m", Generation: gen1, Node: "a", State: pb.StageState_STAGE_STATE_READY})
	mod := h.s.placements[PlacementKey("m", 0)].ModifyIndex
	// Stale CAS after the state change.
	if r := put(gen1, "b"); !errors.Is(r.Err, ErrConflict) || r.Err.(*Error).CurrentIndex != mod {
		t.Fatalf("stale CAS: %+v", r)
	}
	r2 := put(mod, "b")
	if r2.Err != nil || r2.Value <= gen1 {
		t.Fatalf("move: %+v", r2)
	}
	// The old owner's late write for generation 1 is fenced off.
	r = h.apply(&pb.PlacementSetState{Model: "m", Generation: gen1, Node: "a", State: pb.StageState_STAGE_STATE_READY})
	if !errors.Is(r.Err, ErrStale) {
		t.Fatalf("stale generation accepted: %+v", r)
	}
	if p := h.s.placements[PlacementKey("m", 0)]; p.Stages[0].Node != "b" || p.Stages[0].State != pb.StageState_STAGE_STATE_ASSIGNED {
		t.Fatalf("placement changed by a stale write: %v", p)
	}
	if r := h.apply(&pb.PlacementDelete{Model: "m", Generation: gen1}); !errors.Is(r.Err, ErrStale) {
		t.Fatalf("stale delete: %+v", r)
	}
	// Deregistering b marks its stage unavailable.
	h.ok(&pb.NodeDeregister{Id: "b"})
	if p := h.s.placements[PlacementKey("m", 0)]; p.Stages[0].State != pb.StageState_STAGE_STATE_UNAVAILABLE {
		t.Fatalf("after deregister: %v", p)
	}
	h.ok(&pb.PlacementDelete{Model: "m", Generation: r2.Value})
	if len(h.s.placements) != 0 {
		t.Fatal("placement not deleted")
	}
}

func TestSettingsCAS(t *testing.T) {
	h := newHarness(t)
	r := h.ok(&pb.SettingPut{Key: "k", Value: []byte("1"), Cas: true})
	v1 := r.Value
	tests := []struct {
		expect uint64
		want   error
	}{{0, ErrConflict}, {v1 + 1, ErrConflict}, {v1, nil}}
	for _, tc := range tests {
		r := h.apply(&pb.SettingPut{Key: "k", Value: []byte("2"), Cas: true, ExpectVersion: tc.expect})
		if !errors.Is(r.Err, tc.want) && !(tc.want == nil && r.Err == nil) {
			t.Fatalf("expect %d: %v, want %v", tc.expect, r.Err, tc.want)
		}
		if tc.want != nil && r.Err.(*Error).CurrentIndex != v1 {
			t.Fatalf("conflict reports %d, want %d", r.Err.(*Error).CurrentIndex, v1)
		}
	}
	if s, _ := h.s.Setting("k"); string(s.Value) != "2" {
		t.Fatalf("value %q", s.Value)
	}
}

// TestMCPConfigPut: the MCP configuration is a setting only its own
// command writes, bounded and JSON, with the settings' CAS; a snapshot
// carries it.
func TestMCPConfigPut(t *testing.T) {
	h := newHarness(t)
	doc := []byte(`{"mcpServers": {}}`)
	for _, tc := range []struct {
		name string
		cmd  proto.Message
		want error
	}{
		{"a setting may not write it", &pb.SettingPut{Key: MCPConfigKey, Value: doc}, ErrInvalid},
		{"nor delete it", &pb.SettingDelete{Key: MCPConfigKey}, ErrInvalid},
		{"over the bound", &pb.MCPConfigPut{Config: []byte(`"` + strings.Repeat("x", MaxMCPConfigBytes) + `"`)}, ErrInvalid},
		{"not JSON", &pb.MCPConfigPut{Config: []byte(`{"mcpServers":`)}, ErrInvalid},
		{"cas on a version that is not there", &pb.MCPConfigPut{Config: doc, Cas: true, ExpectVersion: 7}, ErrConflict},
	} {
		if r := h.apply(tc.cmd); !errors.Is(r.Err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, r.Err, tc.want)
		}
	}
	if _, ok := h.s.Setting(MCPConfigKey); ok {
		t.Fatal("a refused command wrote the setting")
	}
	r := h.ok(&pb.MCPConfigPut{Config: doc, Cas: true})
	if r.Changes[0].Table != TableSettings || r.Changes[0].Key != MCPConfigKey || r.Changes[0].Kind != Created {
		t.Errorf("changes %+v", r.Changes)
	}
	next := []byte(`{"mcpServers": {"fs": {"command": "x"}}}`)
	if r := h.apply(&pb.MCPConfigPut{Config: next, Cas: true, ExpectVersion: r.Value - 1}); !errors.Is(r.Err, ErrConflict) {
		t.Errorf("stale cas: %v", r.Err)
	}
	h.ok(&pb.MCPConfigPut{Config: next, Cas: true, ExpectVersion: r.Value})
	var buf bytes.Buffer
	if _, err := h.s.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	s2, err := ReadState(&buf, 16)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := s2.Setting(MCPConfigKey); !ok || string(v.Value) != string(next) {
		t.Errorf("after a snapshot: %q %v", v.GetValue(), ok)
	}
}

func TestSessionLifecycle(t *testing.T) {
	h := newHarness(t)
	now := 100 * sec
	create := func(id string, at int64, policy pb.CapPolicy) Result {
		return h.apply(&pb.SessionCreate{Session: &pb.Session{Id: id, Model: "m", ExpiresUnixNano: at + 10*sec},
			NowUnixNano: at, MaxSessions: 3, Policy: policy})
	}
	for i, id := range []string{"a", "b", "c"} {
		if r := create(id, now+int64(i)*sec, pb.CapPolicy_CAP_POLICY_REJECT); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if r := create("a", now+3*sec, pb.CapPolicy_CAP_POLICY_EVICT_LRU); !errors.Is(r.Err, ErrExists) {
		t.Fatalf("duplicate id: %v", r.Err)
	}
	if r := create("d", now+3*sec, pb.CapPolicy_CAP_POLICY_REJECT); !errors.Is(r.Err, ErrSessionCap) {
		t.Fatalf("at cap: %v", r.Err)
	}
	// Touch a: b becomes the least recently used; make b busy so c is evicted.
	h.ok(&pb.SessionTouch{Id: "a", NowUnixNano: now + 4*sec, ExpiresUnixNano: now + 14*sec})
	h.ok(&pb.SessionTurnBegin{Id: "b", ExpectTurn: 0, NowUnixNano: now + 4*sec, ExpiresUnixNano: now + 14*sec,
		HistoryAppend: []byte(`[{"role":"user","content":"q"}]`)})
	h.ok(&pb.SessionTouch{Id: "a", NowUnixNano: now + 5*sec, ExpiresUnixNano: now + 6*sec}) // never shortens
	if se := h.s.sessions["a"]; se.ExpiresUnixNano != now+14*sec || se.LastAccessUnixNano != now+5*sec {
		t.Fatalf("touch: %v", se)
	}
	r := create("d", now+5*sec, pb.CapPolicy_CAP_POLICY_EVICT_LRU)
	if r.Err != nil || r.Ref != "c" {
		t.Fatalf("LRU eviction: %+v", r)
	}
	// Concurrent turn on b conflicts; wrong turn number conflicts.
	if r := h.apply(&pb.SessionTurnBegin{Id: "b", ExpectTurn: 0, NowUnixNano: now + 5*sec}); !errors.Is(r.Err, ErrConflict) {
		t.Fatalf("concurrent turn: %v", r.Err)
	}
	if r := h.apply(&pb.SessionTurnBegin{Id: "a", ExpectTurn: 1, NowUnixNano: now + 5*sec}); !errors.Is(r.Err, ErrConflict) {
		t.Fatalf("wrong turn: %v", r.Err)
	}
	if r := h.apply(&pb.SessionTurnEnd{Id: "a", Turn: 0, NowUnixNano: now + 5*sec}); !errors.Is(r.Err, ErrConflict) {
		t.Fatalf("end without begin: %v", r.Err)
	}
	h.ok(&pb.SessionTurnEnd{Id: "b", Turn: 0, HistoryAppend: []byte(`[{"role":"assistant","content":"a"}]`), NowUnixNano: now + 6*sec})
	b := h.s.sessions["b"]
	if b.Turn != 1 || b.Active || string(b.History) != `[{"role":"user","content":"q"},{"role":"assistant","content":"a"}]` {
		t.Fatalf("after turn: turn %d active %v history %s", b.Turn, b.Active, b.History)
	}
	if r := h.apply(&pb.SessionTurnBegin{Id: "b", ExpectTurn: 1, NowUnixNano: now + 6*sec, HistoryAppend: []byte(`{"not":"array"}`)}); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("bad history: %v", r.Err)
	}
	// Everything but a (renewed to +14 s) and b (+14 s) and d (+15 s) has expired at +15 s... reap at +14.5 s.
	r = h.ok(&pb.SessionReap{NowUnixNano: now + 14*sec + sec/2})
	if _, ok := h.s.sessions["a"]; ok {
		t.Fatal("expired session a survived the reap")
	}
	if _, ok := h.s.sessions["d"]; !ok || len(r.Changes) != 2 {
		t.Fatalf("reap removed %d sessions, d present %v", len(r.Changes), ok)
	}
	// An expired, unreaped session is invisible to reads and touch.
	if _, ok := h.s.Session("d", now+16*sec); ok {
		t.Fatal("expired session readable")
	}
	if r := h.apply(&pb.SessionTouch{Id: "d", NowUnixNano: now + 16*sec, ExpiresUnixNano: now + 30*sec}); !errors.Is(r.Err, ErrNotFound) {
		t.Fatalf("touch of an expired session: %v", r.Err)
	}
	h.ok(&pb.SessionDestroy{Id: "d"})
	if r := h.apply(&pb.SessionDestroy{Id: "d"}); !errors.Is(r.Err, ErrNotFound) {
		t.Fatalf("double destroy: %v", r.Err)
	}
}

func TestCapCountsOnlyUnexpired(t *testing.T) {
	h := newHarness(t)
	for _, id := range []string{"a", "b"} {
		h.ok(&pb.SessionCreate{Session: &pb.Session{Id: id, ExpiresUnixNano: 2 * sec}, NowUnixNano: sec, MaxSessions: 2})
	}
	// At 3 s both have expired (not reaped): a new session fits under the cap.
	h.ok(&pb.SessionCreate{Session: &pb.Session{Id: "c", ExpiresUnixNano: 9 * sec}, NowUnixNano: 3 * sec, MaxSessions: 2})
	// An expired session's id can be reused.
	h.ok(&pb.SessionCreate{Session: &pb.Session{Id: "a", ExpiresUnixNano: 9 * sec}, NowUnixNano: 3 * sec, MaxSessions: 2})
	if r := h.apply(&pb.SessionCreate{Session: &pb.Session{Id: "d", ExpiresUnixNano: 9 * sec}, NowUnixNano: 3 * sec, MaxSessions: 2}); !errors.Is(r.Err, ErrSessionCap) {
		t.Fatalf("over the cap: %v", r.Err)
	}
}

func TestDedupAcrossSnapshot(t *testing.T) {
	h := newHarness(t)
	cmd := &pb.SettingPut{RequestId: "req-1", Key: "k", Value: []byte("x"), Cas: true}
	first := h.ok(cmd)
	var buf bytes.Buffer
	if _, err := h.s.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	s2, err := ReadState(&buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Encode(cmd)
	r := s2.Apply(h.idx+1, b) // the client's retry arrives at the restored replica
	if !r.Duplicate || r.Err != nil || r.Index != first.Index || r.Value != first.Value {
		t.Fatalf("retry after restore: %+v (first %+v)", r, first)
	}
	if v, _ := s2.Setting("k"); v.Version != first.Value {
		t.Fatalf("retry applied twice: version %d", v.Version)
	}
	// A retried failure returns the same failure.
	bad := &pb.SettingPut{RequestId: "req-2", Key: "k", Cas: true, ExpectVersion: 999}
	b, _ = Encode(bad)
	r1 := s2.Apply(h.idx+2, b)
	r2 := s2.Apply(h.idx+3, b)
	if !errors.Is(r1.Err, ErrConflict) || !errors.Is(r2.Err, ErrConflict) || !r2.Duplicate || r2.Index != r1.Index {
		t.Fatalf("retried failure: %+v %+v", r1, r2)
	}
}

func TestDedupBounded(t *testing.T) {
	s := NewState(4)
	for i := 1; i <= 10; i++ {
		b, _ := Encode(&pb.Noop{RequestId: string(rune('a' + i))})
		s.Apply(uint64(i), b)
	}
	if len(s.dedup) != 4 || s.dedup[string(rune('a'+10))] == nil || s.dedup[string(rune('a'+6))] != nil {
		t.Fatalf("dedup keeps %v", s.dedupOrder())
	}
}

func TestUnknownTypes(t *testing.T) {
	s := NewState(0)
	r := s.Apply(1, []byte{byte(IgnoreUnknown | 0x70), 0x0a, 0x01, 'x'})
	if !r.Ignored || s.AppliedIndex() != 1 {
		t.Fatalf("ignorable unknown type: %+v", r)
	}
	for name, cmd := range map[string][]byte{
		"unknown type":        {0x70, 1},
		"empty":               {},
		"undecodable payload": {byte(TypeSettingPut), 0xff, 0xff, 0xff},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Apply did not panic", name)
				}
			}()
			s.Apply(2, cmd)
		}()
	}
	if _, _, err := Decode([]byte{0x70}); !errors.Is(err, ErrUnknownType) {
		t.Fatalf("Decode unknown: %v", err)
	}
}

func TestFSMRestoreSwapsAndNotifies(t *testing.T) {
	f := New(0)
	var got []Change
	cancel := f.Subscribe(func(c []Change) { got = append(got, c...) })
	defer cancel()
	b, _ := Encode(&pb.SessionCreate{Session: &pb.Session{Id: "s", ExpiresUnixNano: 5 * sec}, NowUnixNano: sec})
	if r := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: b}).(Result); r.Err != nil {
		t.Fatal(r.Err)
	}
	if len(got) != 1 || got[0].Kind != Created || got[0].Session.GetId() != "s" || got[0].Index != 1 {
		t.Fatalf("changes %+v", got)
	}
	snap, _ := f.Snapshot()
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	b, _ = Encode(&pb.SessionDestroy{Id: "s"})
	f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: b})
	if err := f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	var n int
	f.Read(func(s *State) { n = len(s.Sessions(2 * sec)) })
	if n != 1 || f.AppliedIndex() != 1 || got[len(got)-1].Kind != Reset {
		t.Fatalf("after restore: %d sessions, applied %d, last change %+v", n, f.AppliedIndex(), got[len(got)-1])
	}
	if err := f.Restore(io.NopCloser(strings.NewReader("garbage"))); err == nil {
		t.Fatal("garbage restored")
	}
	f.Read(func(s *State) { n = len(s.Sessions(2 * sec)) })
	if n != 1 {
		t.Fatal("a failed restore changed the state")
	}
}

type memSink struct {
	bytes.Buffer
	cancelled bool
}

func (m *memSink) ID() string    { return "mem" }
func (m *memSink) Cancel() error { m.cancelled = true; return nil }
func (m *memSink) Close() error  { return nil }

func FuzzDecode(f *testing.F) {
	for _, m := range []proto.Message{
		&pb.SessionCreate{Session: &pb.Session{Id: "s", History: []byte(`[]`)}},
		&pb.PlacementPut{Placement: &pb.Placement{Model: "m", NumLayers: 4, Stages: []*pb.Stage{{Node: "a", LayerEnd: 4}}}},
		&pb.SettingPut{Key: "k", Cas: true},
	} {
		b, _ := Encode(m)
		f.Add(b)
	}
	f.Add([]byte{0xfe, 1, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		typ, m, err := Decode(b)
		if err != nil {
			return
		}
		// A decodable command must apply without panicking and re-encode
		// to a command that decodes to the same message.
		s := NewState(8)
		s.Apply(1, b)
		b2, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		typ2, m2, err := Decode(b2)
		if err != nil || typ2 != typ || !proto.Equal(m, m2) {
			t.Fatalf("re-decode: %v %d %d", err, typ, typ2)
		}
	})
}

func FuzzReadState(f *testing.F) {
	h := &harness{t: &testing.T{}, s: NewState(0)}
	h.apply(&pb.SessionCreate{Session: &pb.Session{Id: "s", ExpiresUnixNano: 5}})
	var buf bytes.Buffer
	h.s.WriteTo(&buf)
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ReadState(bytes.NewReader(b), 8)
	})
}

func TestSessionTTLFromCommandClock(t *testing.T) {
	h := newHarness(t)
	h.ok(&pb.SessionCreate{Session: &pb.Session{Id: "s"}, NowUnixNano: 10 * sec, TtlNanos: 5 * sec})
	if se := h.s.sessions["s"]; se.ExpiresUnixNano != 15*sec || se.CreatedUnixNano != 10*sec {
		t.Fatalf("create: %v", se)
	}
	h.ok(&pb.SessionTouch{Id: "s", NowUnixNano: 12 * sec, TtlNanos: 5 * sec})
	h.ok(&pb.SessionTurnBegin{Id: "s", NowUnixNano: 13 * sec, TtlNanos: 1 * sec}) // never shortens
	if se := h.s.sessions["s"]; se.ExpiresUnixNano != 17*sec || se.LastAccessUnixNano != 13*sec {
		t.Fatalf("renewed: %v", se)
	}
	if r := h.apply(&pb.SessionCreate{Session: &pb.Session{Id: "x"}, NowUnixNano: 10 * sec}); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("create without expiry: %v", r.Err)
	}
}

func TestNodeInventory(t *testing.T) {
	h := newHarness(t)
	if r := h.apply(&pb.NodeSetInventory{Id: "a", Inventory: []byte(`{}`)}); !errors.Is(r.Err, ErrNotFound) {
		t.Fatalf("unknown node: %v", r.Err)
	}
	h.nodes("a")
	if r := h.apply(&pb.NodeSetInventory{Id: "a", Inventory: []byte(`{"loaded":`)}); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("bad JSON: %v", r.Err)
	}
	h.ok(&pb.NodeSetInventory{Id: "a", Inventory: []byte(`{"loaded":["m"]}`)})
	h.ok(&pb.NodeUpsert{Node: &pb.Node{Id: "a", HttpAddr: "new", Inventory: []byte(`{"loaded":["m"]}`)}})
	if n, _ := h.s.Node("a"); string(n.Inventory) != `{"loaded":["m"]}` || n.HttpAddr != "new" {
		t.Fatalf("node %v", n)
	}
}

// TestSessionUpdateModifyCAS: an update that expects the session's modify
// index applies only if nothing changed the session since; a stale one is
// a conflict and leaves the history as it was.
func TestSessionUpdateModifyCAS(t *testing.T) {
	h := newHarness(t)
	now := 100 * sec
	h.ok(&pb.SessionCreate{Session: &pb.Session{Id: "s", Model: "m", ExpiresUnixNano: now + 100*sec}, NowUnixNano: now, MaxSessions: 10})
	se, _ := h.s.Session("s", now)
	first := se.ModifyIndex
	h.ok(&pb.SessionUpdate{Id: "s", ExpectModify: &first, SetHistory: true, History: []byte(`[{"role":"user","content":"a"}]`), NowUnixNano: now})
	r := h.apply(&pb.SessionUpdate{Id: "s", ExpectModify: &first, SetHistory: true, History: []byte(`[{"role":"user","content":"b"}]`), NowUnixNano: now})
	if !errors.Is(r.Err, ErrConflict) {
		t.Fatalf("stale modify index: %v, want a conflict", r.Err)
	}
	se, _ = h.s.Session("s", now)
	if string(se.History) != `[{"role":"user","content":"a"}]` {
		t.Fatalf("history after a refused update: %s", se.History)
	}
	cur := se.ModifyIndex
	h.ok(&pb.SessionUpdate{Id: "s", ExpectModify: &cur, SetHistory: true, History: []byte(`[]`), NowUnixNano: now})
}

// TestJobs: a job record is written whole, a finished one never changes
// again (a late progress write cannot revive it), only finished jobs are
// deleted, a restart interrupts exactly the node's live jobs, the table
// keeps at most MaxJobs by evicting the oldest finished, and a snapshot
// carries the records.
func TestJobs(t *testing.T) {
	h := newHarness(t)
	job := func(id, node, state string, at int64) *pb.Job {
		return &pb.Job{Id: id, Kind: "download", Node: node, State: state, CreatedUnixNano: at, UpdatedUnixNano: at, Unit: "bytes", Total: 10}
	}
	for _, tc := range []struct {
		name string
		cmd  proto.Message
		want error
	}{
		{"no id", &pb.JobPut{Job: &pb.Job{Kind: "download", Node: "a", State: JobQueued}}, ErrInvalid},
		{"no node", &pb.JobPut{Job: &pb.Job{Id: "x", Kind: "download", State: JobQueued}}, ErrInvalid},
		{"unknown state", &pb.JobPut{Job: job("x", "a", "sleeping", 1)}, ErrInvalid},
		{"over the bound", &pb.JobPut{Job: &pb.Job{Id: "x", Kind: "download", Node: "a", State: JobRunning, Params: make([]byte, MaxJobBytes)}}, ErrInvalid},
		{"delete unknown", &pb.JobDelete{Id: "x"}, ErrNotFound},
		{"interrupt without node", &pb.JobsInterrupt{}, ErrInvalid},
	} {
		if r := h.apply(tc.cmd); !errors.Is(r.Err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, r.Err, tc.want)
		}
	}
	h.ok(&pb.JobPut{Job: job("j1", "a", JobRunning, 1)})
	h.ok(&pb.JobPut{Job: job("j2", "a", JobQueued, 2)})
	h.ok(&pb.JobPut{Job: job("j3", "b", JobRunning, 3)})
	h.ok(&pb.JobPut{Job: job("j4", "a", JobRunning, 10)}) // the new run's, after the restart at 9
	if r := h.apply(&pb.JobDelete{Id: "j1"}); !errors.Is(r.Err, ErrConflict) {
		t.Errorf("deleting a running job: %v", r.Err)
	}
	if r := h.apply(&pb.JobPut{Job: job("j1", "b", JobRunning, 1)}); !errors.Is(r.Err, ErrInvalid) {
		t.Errorf("moving a job to another node: %v", r.Err)
	}
	r := h.ok(&pb.JobsInterrupt{Node: "a", UnixNano: 9})
	if r.Value != 2 {
		t.Errorf("interrupted %d jobs, want 2", r.Value)
	}
	for id, want := range map[string]string{"j1": JobInterrupted, "j2": JobInterrupted, "j3": JobRunning, "j4": JobRunning} {
		if j, _ := h.s.Job(id); j.State != want {
			t.Errorf("%s: %s, want %s", id, j.State, want)
		}
	}
	if j, _ := h.s.Job("j1"); j.UpdatedUnixNano != 9 || j.Error == "" {
		t.Errorf("interrupted record %+v", j)
	}
	if r := h.apply(&pb.JobPut{Job: job("j1", "a", JobRunning, 1)}); !errors.Is(r.Err, ErrConflict) {
		t.Errorf("reviving a finished job: %v", r.Err)
	}
	h.ok(&pb.JobDelete{Id: "j2"})
	if _, ok := h.s.Job("j2"); ok {
		t.Error("deleted job still there")
	}
	// Fill to the cap: the oldest finished job (j1) goes first; with
	// only live jobs left a new one is refused.
	for i := len(h.s.jobs); i < MaxJobs; i++ {
		h.ok(&pb.JobPut{Job: job(fmt.Sprintf("q%04d", i), "c", JobQueued, int64(100+i))})
	}
	r = h.ok(&pb.JobPut{Job: job("new", "c", JobQueued, 5000)})
	if _, ok := h.s.Job("j1"); ok || r.Changes[0].Kind != Deleted || r.Changes[0].Key != "j1" {
		t.Errorf("the oldest finished job was not evicted: %+v", r.Changes)
	}
	if r := h.apply(&pb.JobPut{Job: job("more", "c", JobQueued, 5001)}); !errors.Is(r.Err, ErrInvalid) {
		t.Errorf("over the cap with every job live: %v", r.Err)
	}
	s2 := restore(t, encodeState(t, h.s), 16)
	if got, want := len(s2.Jobs()), MaxJobs; got != want {
		t.Errorf("after a snapshot: %d jobs, want %d", got, want)
	}
	if j, ok := s2.Job("j3"); !ok || j.State != JobRunning || j.Node != "b" {
		t.Errorf("after a snapshot: %+v", j)
	}
}
