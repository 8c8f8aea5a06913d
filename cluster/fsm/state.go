package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"google.golang.org/protobuf/proto"

	pb "fusion/cluster/clusterpb"
)

// DefaultDedupSize is the default number of request ids remembered.
const DefaultDedupSize = 16384

// Table names a kind of record in a Change.
type Table uint8

// Tables.
const (
	TableAll Table = iota // a restore replaced everything
	TableNodes
	TablePlacements
	TableSessions
	TableAPIKeys
	TableSettings
	TableJobs
	TableProfiles
)

// ChangeKind says what happened to a record.
type ChangeKind uint8

// Change kinds.
const (
	Created ChangeKind = iota + 1
	Updated
	Deleted
	Reset // TableAll: the state was restored from a snapshot
)

// Change describes one record changed by an applied command.
type Change struct {
	Index  uint64
	Table  Table
	Kind   ChangeKind
	Key    string // node/session/key/setting id, or "model/replica"
	Reason string // for deletions: "destroyed", "expired", "evicted", ...
	// Session is the session after the change (nil when deleted). It is
	// shared: do not modify it.
	Session *pb.Session
}

// Result is what Apply returns for one command.
type Result struct {
	Index     uint64 // the log index that applied it (the original one for a duplicate)
	Err       error  // *Error, or nil
	Value     uint64 // placement generation or setting version written
	Ref       string // the session evicted by a create, if any
	Duplicate bool   // the request id had already been applied
	Ignored   bool   // an unknown type with IgnoreUnknown
	Changes   []Change
}

// State is the in-memory replicated state. Records are never modified in
// place once stored (copy on write), so a snapshot only copies the maps.
// State is not safe for concurrent use; FSM adds the locking.
type State struct {
	applied    uint64
	clusterID  string
	nodes      map[string]*pb.Node
	placements map[string]*pb.Placement
	sessions   map[string]*pb.Session
	apiKeys    map[string]*pb.APIKey
	settings   map[string]*pb.Setting
	panel      map[string]*pb.PanelSession // by the hash's bytes
	jobs       map[string]*pb.Job
	profiles   map[string]*pb.Profile // by profileKey
	dedup      map[string]*pb.DedupEntry
	dedupRing  []string // FIFO of request ids; len ≤ dedupSize
	dedupHead  int
	dedupSize  int
}

// NewState returns empty state remembering up to dedupSize request ids
// (DefaultDedupSize when ≤ 0). Every replica must use the same size.
func NewState(dedupSize int) *State {
	if dedupSize <= 0 {
		dedupSize = DefaultDedupSize
	}
	return &State{
		nodes:      map[string]*pb.Node{},
		placements: map[string]*pb.Placement{},
		sessions:   map[string]*pb.Session{},
		apiKeys:    map[string]*pb.APIKey{},
		settings:   map[string]*pb.Setting{},
		panel:      map[string]*pb.PanelSession{},
		jobs:       map[string]*pb.Job{},
		profiles:   map[string]*pb.Profile{},
		dedup:      map[string]*pb.DedupEntry{},
		dedupSize:  dedupSize,
	}
}

// AppliedIndex is the index of the last applied command.
func (s *State) AppliedIndex() uint64 { return s.applied }

// clone copies the maps (records are shared, never mutated).
func (s *State) clone() *State {
	c := &State{
		applied:    s.applied,
		clusterID:  s.clusterID,
		nodes:      make(map[string]*pb.Node, len(s.nodes)),
		placements: make(map[string]*pb.Placement, len(s.placements)),
		sessions:   make(map[string]*pb.Session, len(s.sessions)),
		apiKeys:    make(map[string]*pb.APIKey, len(s.apiKeys)),
		settings:   make(map[string]*pb.Setting, len(s.settings)),
		panel:      make(map[string]*pb.PanelSession, len(s.panel)),
		jobs:       make(map[string]*pb.Job, len(s.jobs)),
		profiles:   make(map[string]*pb.Profile, len(s.profiles)),
		dedup:      make(map[string]*pb.DedupEntry, len(s.dedup)),
		dedupRing:  append([]string(nil), s.dedupRing...),
		dedupHead:  s.dedupHead,
		dedupSize:  s.dedupSize,
	}
	for k, v := range s.nodes {
		c.nodes[k] = v
	}
	for k, v := range s.placements {
		c.placements[k] = v
	}
	for k, v := range s.sessions {
		c.sessions[k] = v
	}
	for k, v := range s.apiKeys {
		c.apiKeys[k] = v
	}
	for k, v := range s.settings {
		c.settings[k] = v
	}
	for k, v := range s.panel {
		c.panel[k] = v
	}
	for k, v := range s.jobs {
		c.jobs[k] = v
	}
	for k, v := range s.profiles {
		c.profiles[k] = v
	}
	for k, v := range s.dedup {
		c.dedup[k] = v
	}
	return c
}

// PlacementKey is the map key of a replica group.
func PlacementKey(model string, replica uint32) string {
	return model + "/" + strconv.FormatUint(uint64(replica), 10)
}

// Apply applies one command at a log index. It panics on an undecodable
// command or an unknown type without IgnoreUnknown, so that replicas
// cannot silently diverge; callers validate with Decode before proposing.
func (s *State) Apply(index uint64, data []byte) Result {
	t, m, err := Decode(data)
	if err != nil {
		if len(data) > 0 && Type(data[0])&IgnoreUnknown != 0 && m == nil && isUnknown(err) {
			s.applied = index
			return Result{Index: index, Ignored: true}
		}
		panic(fmt.Sprintf("fsm: index %d: %v", index, err))
	}
	rid := RequestID(m)
	if rid != "" {
		if e, ok := s.dedup[rid]; ok {
			s.applied = index
			return Result{Index: e.Index, Err: ErrorFromCode(Code(e.ErrorCode), e.ErrorMessage, e.CurrentIndex),
				Value: e.Value, Ref: e.Ref, Duplicate: true}
		}
	}
	r := s.apply(t, m, index)
	r.Index = index
	for i := range r.Changes {
		r.Changes[i].Index = index
	}
	s.applied = index
	if rid != "" {
		e := &pb.DedupEntry{RequestId: rid, Index: index, Value: r.Value, Ref: r.Ref}
		if r.Err != nil {
			fe := r.Err.(*Error)
			e.ErrorCode, e.ErrorMessage, e.CurrentIndex = uint32(fe.Code), fe.Msg, fe.CurrentIndex
		}
		s.remember(e)
	}
	return r
}

func isUnknown(err error) bool {
	for e := err; e != nil; {
		if e == ErrUnknownType {
			return true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = u.Unwrap()
	}
	return false
}

func (s *State) remember(e *pb.DedupEntry) {
	if len(s.dedupRing) < s.dedupSize {
		s.dedupRing = append(s.dedupRing, e.RequestId)
	} else {
		delete(s.dedup, s.dedupRing[s.dedupHead])
		s.dedupRing[s.dedupHead] = e.RequestId
		s.dedupHead = (s.dedupHead + 1) % s.dedupSize
	}
	s.dedup[e.RequestId] = e
}

// dedupOrder returns the remembered request ids oldest first.
func (s *State) dedupOrder() []string {
	out := make([]string, 0, len(s.dedupRing))
	out = append(out, s.dedupRing[s.dedupHead:]...)
	return append(out, s.dedupRing[:s.dedupHead]...)
}

func (s *State) apply(t Type, m proto.Message, index uint64) Result {
	switch c := m.(type) {
	case *pb.Noop:
		return Result{}
	case *pb.NodeUpsert:
		return s.nodeUpsert(c, index)
	case *pb.NodeSetStatus:
		return s.nodeSetStatus(c, index)
	case *pb.NodeDeregister:
		return s.nodeDeregister(c, index)
	case *pb.NodeSetDraining:
		return s.nodeSetDraining(c, index)
	case *pb.NodeSetInventory:
		return s.nodeSetInventory(c, index)
	case *pb.PlacementPut:
		return s.placementPut(c, index)
	case *pb.PlacementSetState:
		return s.placementSetState(c, index)
	case *pb.PlacementDelete:
		return s.placementDelete(c, index)
	case *pb.SessionCreate:
		return s.sessionCreate(c, index)
	case *pb.SessionTouch:
		return s.sessionTouch(c, index)
	case *pb.SessionTurnBegin:
		return s.sessionTurnBegin(c, index)
	case *pb.SessionTurnEnd:
		return s.sessionTurnEnd(c, index)
	case *pb.SessionUpdate:
		return s.sessionUpdate(c, index)
	case *pb.SessionDestroy:
		return s.sessionDestroy(c, index)
	case *pb.SessionReap:
		return s.sessionReap(c, index)
	case *pb.APIKeyPut:
		return s.apiKeyPut(c, index)
	case *pb.APIKeyRevoke:
		return s.apiKeyRevoke(c, index)
	case *pb.SettingPut:
		return s.settingPut(c, index)
	case *pb.SettingDelete:
		return s.settingDelete(c, index)
	case *pb.MCPConfigPut:
		return s.mcpConfigPut(c, index)
	case *pb.PanelSessionPut:
		return s.panelSessionPut(c)
	case *pb.PanelSessionEnd:
		return s.panelSessionEnd(c)
	case *pb.JobPut:
		return s.jobPut(c)
	case *pb.JobDelete:
		return s.jobDelete(c)
	case *pb.JobsInterrupt:
		return s.jobsInterrupt(c)
	case *pb.ProfilePut:
		return s.profilePut(c)
	case *pb.ProfileDelete:
		return s.profileDelete(c)
	}
	panic(fmt.Sprintf("fsm: type %d has no apply case", t))
}

func fail(c Code, cur uint64, format string, args ...any) Result {
	return Result{Err: errorf(c, cur, format, args...)}
}

// ---- nodes ----

func (s *State) nodeUpsert(c *pb.NodeUpsert, index uint64) Result {
	in := c.GetNode()
	if in.GetId() == "" {
		return fail(CodeInvalid, 0, "node id is required")
	}
	n := proto.Clone(in).(*pb.Node)
	if n.Status == pb.NodeStatus_NODE_STATUS_UNSPECIFIED {
		n.Status = pb.NodeStatus_NODE_STATUS_ALIVE
	}
	kind := Created
	n.CreateIndex = index
	n.StatusTimeUnixNano = c.NowUnixNano
	if old, ok := s.nodes[n.Id]; ok {
		kind = Updated
		n.CreateIndex = old.CreateIndex
		if old.Status == n.Status {
			n.StatusTimeUnixNano = old.StatusTimeUnixNano
		}
		n.ModifyIndex = old.ModifyIndex
		if proto.Equal(old, n) {
			return Result{}
		}
	}
	n.ModifyIndex = index
	s.nodes[n.Id] = n
	return Result{Changes: []Change{{Table: TableNodes, Kind: kind, Key: n.Id}}}
}

func (s *State) nodeSetStatus(c *pb.NodeSetStatus, index uint64) Result {
	old, ok := s.nodes[c.Id]
	if !ok {
		return fail(CodeNotFound, 0, "node %q", c.Id)
	}
	if old.Status == c.Status {
		return Result{}
	}
	n := proto.Clone(old).(*pb.Node)
	n.Status, n.StatusTimeUnixNano, n.ModifyIndex = c.Status, c.NowUnixNano, index
	s.nodes[n.Id] = n
	return Result{Changes: []Change{{Table: TableNodes, Kind: Updated, Key: n.Id}}}
}

func (s *State) nodeDeregister(c *pb.NodeDeregister, index uint64) Result {
	if _, ok := s.nodes[c.Id]; !ok {
		return fail(CodeNotFound, 0, "node %q", c.Id)
	}
	delete(s.nodes, c.Id)
	r := Result{Changes: []Change{{Table: TableNodes, Kind: Deleted, Key: c.Id, Reason: "deregistered"}}}
	for _, k := range sortedKeys(s.placements) {
		p := s.placements[k]
		var np *pb.Placement
		for i, st := range p.Stages {
			if st.Node == c.Id && st.State != pb.StageState_STAGE_STATE_UNAVAILABLE {
				if np == nil {
					np = proto.Clone(p).(*pb.Placement)
				}
				np.Stages[i].State = pb.StageState_STAGE_STATE_UNAVAILABLE
			}
		}
		if np != nil {
			np.ModifyIndex = index
			s.placements[k] = np
			r.Changes = append(r.Changes, Change{Table: TablePlacements, Kind: Updated, Key: k})
		}
	}
	return r
}

func (s *State) nodeSetDraining(c *pb.NodeSetDraining, index uint64) Result {
	old, ok := s.nodes[c.Id]
	if !ok {
		return fail(CodeNotFound, 0, "node %q", c.Id)
	}
	if old.Draining == c.Draining {
		return Result{}
	}
	n := proto.Clone(old).(*pb.Node)
	n.Draining, n.ModifyIndex = c.Draining, index
	s.nodes[n.Id] = n
	return Result{Changes: []Change{{Table: TableNodes, Kind: Updated, Key: n.Id}}}
}

func (s *State) nodeSetInventory(c *pb.NodeSetInventory, index uint64) Result {
	old, ok := s.nodes[c.Id]
	if !ok {
		return fail(CodeNotFound, 0, "node %q", c.Id)
	}
	if len(c.Inventory) > 0 && !json.Valid(c.Inventory) {
		return fail(CodeInvalid, 0, "node %q: inventory is not JSON", c.Id)
	}
	if bytes.Equal(old.Inventory, c.Inventory) {
		return Result{}
	}
	n := proto.Clone(old).(*pb.Node)
	n.Inventory, n.ModifyIndex = append([]byte(nil), c.Inventory...), index
	s.nodes[n.Id] = n
	return Result{Changes: []Change{{Table: TableNodes, Kind: Updated, Key: n.Id}}}
}

// ---- placements ----

func (s *State) placementPut(c *pb.PlacementPut, index uint64) Result {
	in := c.GetPlacement()
	if in.GetModel() == "" {
		return fail(CodeInvalid, 0, "placement model is required")
	}
	key := PlacementKey(in.Model, in.Replica)
	var cur uint64
	old, exists := s.placements[key]
	if exists {
		cur = old.ModifyIndex
	}
	if cur != c.ExpectIndex {
		return fail(CodeConflict, cur, "placement %s: expected index %d, current %d", key, c.ExpectIndex, cur)
	}
	p := proto.Clone(in).(*pb.Placement)
	if err := checkStages(p); err != nil {
		return Result{Err: err}
	}
	for _, st := range p.Stages {
		n, ok := s.nodes[st.Node]
		if !ok {
			return fail(CodeInvalid, 0, "placement %s: unknown node %q", key, st.Node)
		}
		if n.Status != pb.NodeStatus_NODE_STATUS_ALIVE {
			return fail(CodeInvalid, 0, "placement %s: node %q is %s", key, st.Node, n.Status)
		}
		if st.State == pb.StageState_STAGE_STATE_UNSPECIFIED {
			st.State = pb.StageState_STAGE_STATE_ASSIGNED
		}
	}
	// The generation is the log index of the put: unique and increasing,
	// so it fences writes for older incarnations of the group.
	p.Generation = index
	p.CreateIndex, p.ModifyIndex = index, index
	kind := Created
	if exists {
		p.CreateIndex = old.CreateIndex
		kind = Updated
	}
	s.placements[key] = p
	return Result{Value: p.Generation, Changes: []Change{{Table: TablePlacements, Kind: kind, Key: key}}}
}

// checkStages sorts a placement's stages by layer and checks that they
// cover [0, num_layers) without gaps or overlaps.
func checkStages(p *pb.Placement) *Error {
	if len(p.Stages) == 0 {
		return errorf(CodeInvalid, 0, "placement %s has no stages", p.Model)
	}
	for _, st := range p.Stages {
		if st.GetNode() == "" {
			return errorf(CodeInvalid, 0, "placement %s: a stage has no node", p.Model)
		}
	}
	if p.NumLayers == 0 {
		if len(p.Stages) != 1 {
			return errorf(CodeInvalid, 0, "placement %s: an unsharded model has exactly one stage", p.Model)
		}
		p.Stages[0].LayerStart, p.Stages[0].LayerEnd = 0, 0
		return nil
	}
	sort.SliceStable(p.Stages, func(i, j int) bool { return p.Stages[i].LayerStart < p.Stages[j].LayerStart })
	var next uint32
	for _, st := range p.Stages {
		if st.LayerEnd <= st.LayerStart {
			return errorf(CodeInvalid, 0, "placement %s: empty layer range [%d,%d)", p.Model, st.LayerStart, st.LayerEnd)
		}
		if st.LayerStart > next {
			return errorf(CodeInvalid, 0, "placement %s: gap in layers [%d,%d)", p.Model, next, st.LayerStart)
		}
		if st.LayerStart < next {
			return errorf(CodeInvalid, 0, "placement %s: overlap in layers [%d,%d)", p.Model, st.LayerStart, next)
		}
		next = st.LayerEnd
	}
	if next != p.NumLayers {
		return errorf(CodeInvalid, 0, "placement %s: layers end at %d, model has %d", p.Model, next, p.NumLayers)
	}
	return nil
}

func (s *State) placementSetState(c *pb.PlacementSetState, index uint64) Result {
	key := PlacementKey(c.Model, c.Replica)
	old, ok := s.placements[key]
	if !ok {
		return fail(CodeNotFound, 0, "placement %s", key)
	}
	if c.Generation != old.Generation {
		return fail(CodeStale, old.Generation, "placement %s: generation %d, current %d", key, c.Generation, old.Generation)
	}
	var np *pb.Placement
	for i, st := range old.Stages {
		if st.Node != c.Node {
			continue
		}
		if st.State == c.State {
			return Result{}
		}
		if np == nil {
			np = proto.Clone(old).(*pb.Placement)
		}
		np.Stages[i].State = c.State
	}
	if np == nil {
		return fail(CodeNotFound, 0, "placement %s has no stage on %q", key, c.Node)
	}
	np.ModifyIndex = index
	s.placements[key] = np
	return Result{Changes: []Change{{Table: TablePlacements, Kind: Updated, Key: key}}}
}

func (s *State) placementDelete(c *pb.PlacementDelete, index uint64) Result {
	key := PlacementKey(c.Model, c.Replica)
	old, ok := s.placements[key]
	if !ok {
		return fail(CodeNotFound, 0, "placement %s", key)
	}
	if c.Generation != 0 && c.Generation != old.Generation {
		return fail(CodeStale, old.Generation, "placement %s: generation %d, current %d", key, c.Generation, old.Generation)
	}
	delete(s.placements, key)
	return Result{Changes: []Change{{Table: TablePlacements, Kind: Deleted, Key: key, Reason: "deleted"}}}
}

// ---- sessions ----

func live(se *pb.Session, now int64) bool { return se.ExpiresUnixNano > now }

// expiry is now+ttl when a TTL is given, else the absolute time.
func expiry(now, abs, ttl int64) int64 {
	if ttl > 0 {
		return now + ttl
	}
	return abs
}

// jsonArray reports whether b is empty or a JSON array.
func jsonArray(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	t := bytes.TrimLeft(b, " \t\r\n")
	return len(t) > 0 && t[0] == '[' && json.Valid(b)
}

// appendArray concatenates two JSON arrays (either may be empty).
func appendArray(a, b []byte) []byte {
	if len(b) == 0 {
		return a
	}
	if len(a) == 0 {
		return append([]byte(nil), b...)
	}
	var x, y []json.RawMessage
	_ = json.Unmarshal(a, &x) // both validated before storing
	_ = json.Unmarshal(b, &y)
	out, _ := json.Marshal(append(x, y...))
	return out
}

func (s *State) changed(se *pb.Session, kind ChangeKind, index uint64) Change {
	return Change{Table: TableSessions, Kind: kind, Key: se.Id, Session: se}
}

func (s *State) sessionCreate(c *pb.SessionCreate, index uint64) Result {
	in := c.GetSession()
	now := c.NowUnixNano
	expires := expiry(now, in.GetExpiresUnixNano(), c.TtlNanos)
	switch {
	case in.GetId() == "":
		return fail(CodeInvalid, 0, "session id is required")
	case expires <= now:
		return fail(CodeInvalid, 0, "session %q expires before it is created", in.Id)
	case !jsonArray(in.History) || !jsonArray(in.Tools):
		return fail(CodeInvalid, 0, "session %q: history and tools must be JSON arrays", in.Id)
	}
	var r Result
	if old, ok := s.sessions[in.Id]; ok {
		if live(old, now) {
			return fail(CodeExists, old.ModifyIndex, "session %q", in.Id)
		}
		delete(s.sessions, in.Id) // expired, not yet reaped
		r.Changes = append(r.Changes, Change{Table: TableSessions, Kind: Deleted, Key: in.Id, Reason: "expired"})
	}
	if c.MaxSessions > 0 {
		n := 0
		var victim *pb.Session
		for _, se := range s.sessions {
			if !live(se, now) {
				continue
			}
			n++
			if !se.Active && (victim == nil || se.LastAccessUnixNano < victim.LastAccessUnixNano ||
				se.LastAccessUnixNano == victim.LastAccessUnixNano && se.Id < victim.Id) {
				victim = se
			}
		}
		if n >= int(c.MaxSessions) {
			if c.Policy != pb.CapPolicy_CAP_POLICY_EVICT_LRU || victim == nil || n > int(c.MaxSessions) {
				return fail(CodeSessionCap, 0, "%d live sessions, cap %d", n, c.MaxSessions)
			}
			delete(s.sessions, victim.Id)
			r.Ref = victim.Id
			r.Changes = append(r.Changes, Change{Table: TableSessions, Kind: Deleted, Key: victim.Id, Reason: "evicted"})
		}
	}
	se := proto.Clone(in).(*pb.Session)
	se.Turn, se.Active = 0, false
	se.ExpiresUnixNano = expires
	se.CreatedUnixNano, se.LastAccessUnixNano = now, now
	se.CreateIndex, se.ModifyIndex = index, index
	s.sessions[se.Id] = se
	r.Changes = append(r.Changes, s.changed(se, Created, index))
	return r
}

// liveSession returns a copy of a live session for modification.
func (s *State) liveSession(id string, now int64) (*pb.Session, *Error) {
	old, ok := s.sessions[id]
	if !ok || !live(old, now) {
		return nil, errorf(CodeNotFound, 0, "session %q", id)
	}
	return proto.Clone(old).(*pb.Session), nil
}

func (s *State) storeSession(se *pb.Session, now, expires int64, index uint64) Result {
	if now > se.LastAccessUnixNano {
		se.LastAccessUnixNano = now
	}
	if expires > se.ExpiresUnixNano { // renewals never shorten
		se.ExpiresUnixNano = expires
	}
	se.ModifyIndex = index
	s.sessions[se.Id] = se
	return Result{Changes: []Change{s.changed(se, Updated, index)}}
}

func (s *State) sessionTouch(c *pb.SessionTouch, index uint64) Result {
	se, err := s.liveSession(c.Id, c.NowUnixNano)
	if err != nil {
		return Result{Err: err}
	}
	return s.storeSession(se, c.NowUnixNano, expiry(c.NowUnixNano, c.ExpiresUnixNano, c.TtlNanos), index)
}

func (s *State) sessionTurnBegin(c *pb.SessionTurnBegin, index uint64) Result {
	se, err := s.liveSession(c.Id, c.NowUnixNano)
	if err != nil {
		return Result{Err: err}
	}
	if se.Active {
		return fail(CodeConflict, se.Turn, "session %q: a turn is running", c.Id)
	}
	if se.Turn != c.ExpectTurn {
		return fail(CodeConflict, se.Turn, "session %q: turn %d, expected %d", c.Id, se.Turn, c.ExpectTurn)
	}
	if !jsonArray(c.HistoryAppend) {
		return fail(CodeInvalid, 0, "session %q: history must be a JSON array", c.Id)
	}
	se.Active = true
	se.History = appendArray(se.History, c.HistoryAppend)
	return s.storeSession(se, c.NowUnixNano, expiry(c.NowUnixNano, c.ExpiresUnixNano, c.TtlNanos), index)
}

func (s *State) sessionTurnEnd(c *pb.SessionTurnEnd, index uint64) Result {
	old, ok := s.sessions[c.Id]
	if !ok { // a running turn's session may be expired but not yet reaped
		return fail(CodeNotFound, 0, "session %q", c.Id)
	}
	if !old.Active || old.Turn != c.Turn {
		return fail(CodeConflict, old.Turn, "session %q: no turn %d running", c.Id, c.Turn)
	}
	if !jsonArray(c.HistoryAppend) {
		return fail(CodeInvalid, 0, "session %q: history must be a JSON array", c.Id)
	}
	se := proto.Clone(old).(*pb.Session)
	if c.ReplaceHistory {
		se.History = append([]byte(nil), c.HistoryAppend...)
	} else {
		se.History = appendArray(se.History, c.HistoryAppend)
	}
	se.Active = false
	if !c.Aborted {
		se.Turn++
	}
	return s.storeSession(se, c.NowUnixNano, expiry(c.NowUnixNano, c.ExpiresUnixNano, c.TtlNanos), index)
}

func (s *State) sessionUpdate(c *pb.SessionUpdate, index uint64) Result {
	se, err := s.liveSession(c.Id, c.NowUnixNano)
	if err != nil {
		return Result{Err: err}
	}
	if c.ExpectTurn != nil && *c.ExpectTurn != se.Turn {
		return fail(CodeConflict, se.Turn, "session %q: turn %d, expected %d", c.Id, se.Turn, *c.ExpectTurn)
	}
	if c.ExpectModify != nil && *c.ExpectModify != se.ModifyIndex {
		return fail(CodeConflict, se.Turn, "session %q: changed at index %d since %d", c.Id, se.ModifyIndex, *c.ExpectModify)
	}
	if c.SetHistory && !jsonArray(c.History) || c.SetTools && !jsonArray(c.Tools) {
		return fail(CodeInvalid, 0, "session %q: history and tools must be JSON arrays", c.Id)
	}
	if c.SetHistory {
		se.History = append([]byte(nil), c.History...)
	}
	if c.SetSystemPrompt {
		se.SystemPrompt = c.SystemPrompt
	}
	if c.SetTools {
		se.Tools = append([]byte(nil), c.Tools...)
	}
	if c.SetMetadata {
		se.Metadata = append([]byte(nil), c.Metadata...)
	}
	return s.storeSession(se, c.NowUnixNano, 0, index)
}

func (s *State) sessionDestroy(c *pb.SessionDestroy, index uint64) Result {
	if _, ok := s.sessions[c.Id]; !ok {
		return fail(CodeNotFound, 0, "session %q", c.Id)
	}
	delete(s.sessions, c.Id)
	return Result{Changes: []Change{{Table: TableSessions, Kind: Deleted, Key: c.Id, Reason: "destroyed"}}}
}

func (s *State) sessionReap(c *pb.SessionReap, index uint64) Result {
	ids := c.Ids
	if len(ids) == 0 {
		ids = sortedKeys(s.sessions)
	}
	var r Result
	for _, id := range ids {
		se, ok := s.sessions[id]
		if !ok || live(se, c.NowUnixNano) {
			continue
		}
		delete(s.sessions, id)
		r.Changes = append(r.Changes, Change{Table: TableSessions, Kind: Deleted, Key: id, Reason: "expired"})
	}
	return r
}

// ---- API keys and settings ----

func (s *State) apiKeyPut(c *pb.APIKeyPut, index uint64) Result {
	k := c.GetKey()
	if k.GetId() == "" || len(k.GetHash()) == 0 {
		return fail(CodeInvalid, 0, "api key id and hash are required")
	}
	nk := proto.Clone(k).(*pb.APIKey)
	nk.ModifyIndex = index
	kind := Created
	if _, ok := s.apiKeys[nk.Id]; ok {
		kind = Updated
	}
	s.apiKeys[nk.Id] = nk
	return Result{Changes: []Change{{Table: TableAPIKeys, Kind: kind, Key: nk.Id}}}
}

func (s *State) apiKeyRevoke(c *pb.APIKeyRevoke, index uint64) Result {
	old, ok := s.apiKeys[c.Id]
	if !ok {
		return fail(CodeNotFound, 0, "api key %q", c.Id)
	}
	if old.RevokedUnixNano != 0 {
		return Result{}
	}
	k := proto.Clone(old).(*pb.APIKey)
	k.RevokedUnixNano, k.ModifyIndex = c.NowUnixNano, index
	s.apiKeys[k.Id] = k
	return Result{Changes: []Change{{Table: TableAPIKeys, Kind: Updated, Key: k.Id}}}
}

func (s *State) settingPut(c *pb.SettingPut, index uint64) Result {
	if c.Key == "" {
		return fail(CodeInvalid, 0, "setting key is required")
	}
	if c.Key == MCPConfigKey {
		return fail(CodeInvalid, 0, "setting %q is written by MCPConfigPut only", c.Key)
	}
	return s.putSetting(c.Key, c.Value, c.Cas, c.ExpectVersion, index)
}

// MCPConfigKey is the setting that holds the cluster's MCP server
// configuration; only MCPConfigPut writes it.
const MCPConfigKey = "mcp/servers"

// MaxMCPConfigBytes bounds the MCP configuration one MCPConfigPut may
// carry: it is a few entries of command lines and URLs, replicated and
// snapshotted like every setting.
const MaxMCPConfigBytes = 256 << 10

func (s *State) mcpConfigPut(c *pb.MCPConfigPut, index uint64) Result {
	if len(c.Config) > MaxMCPConfigBytes {
		return fail(CodeInvalid, 0, "mcp config of %d bytes is over the limit of %d", len(c.Config), MaxMCPConfigBytes)
	}
	if !json.Valid(c.Config) {
		return fail(CodeInvalid, 0, "mcp config is not JSON")
	}
	return s.putSetting(MCPConfigKey, c.Config, c.Cas, c.ExpectVersion, index)
}

// putSetting writes a setting, with a compare-and-set on its version
// when cas is set.
func (s *State) putSetting(key string, value []byte, cas bool, expect, index uint64) Result {
	var cur uint64
	old, ok := s.settings[key]
	if ok {
		cur = old.Version
	}
	if cas && cur != expect {
		return fail(CodeConflict, cur, "setting %q: expected version %d, current %d", key, expect, cur)
	}
	kind := Created
	if ok {
		kind = Updated
	}
	s.settings[key] = &pb.Setting{Key: key, Value: append([]byte(nil), value...), Version: index}
	return Result{Value: index, Changes: []Change{{Table: TableSettings, Kind: kind, Key: key}}}
}

func (s *State) settingDelete(c *pb.SettingDelete, index uint64) Result {
	if c.Key == MCPConfigKey {
		return fail(CodeInvalid, 0, "setting %q is written by MCPConfigPut only", c.Key)
	}
	old, ok := s.settings[c.Key]
	var cur uint64
	if ok {
		cur = old.Version
	}
	if c.Cas && cur != c.ExpectVersion {
		return fail(CodeConflict, cur, "setting %q: expected version %d, current %d", c.Key, c.ExpectVersion, cur)
	}
	if !ok {
		return fail(CodeNotFound, 0, "setting %q", c.Key)
	}
	delete(s.settings, c.Key)
	return Result{Changes: []Change{{Table: TableSettings, Kind: Deleted, Key: c.Key, Reason: "deleted"}}}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
