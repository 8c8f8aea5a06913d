package cluster

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
)

// MemberInfo is one node as this node sees it: gossip state, raft
// suffrage and catalog data.
type MemberInfo struct {
	ID       string `json:"id"`
	HTTP     string `json:"http"`
	GRPC     string `json:"grpc"`
	Raft     string `json:"raft,omitempty"`
	Gossip   string `json:"gossip,omitempty"`
	Status   string `json:"status"` // alive, failed, left (gossip), or the catalog's when gossip never saw it
	Voter    bool   `json:"voter"`
	InRaft   bool   `json:"in_raft"`
	Leader   bool   `json:"leader"`
	Draining bool   `json:"draining"`
	Role     string `json:"role,omitempty"`
	Version  string `json:"version,omitempty"`
	Backend  string `json:"backend,omitempty"` // compute backend, from gossip
	// RTTMicros is the node's round trip to each peer in µs as it last
	// published it in its inventory (what the shard planner reads).
	RTTMicros map[string]int64 `json:"rtt_us,omitempty"`
}

// Members lists every node known to gossip, the raft configuration or the
// catalog, sorted by id.
func (m *Member) Members() []MemberInfo {
	out := map[string]*MemberInfo{}
	get := func(id string) *MemberInfo {
		if mi, ok := out[id]; ok {
			return mi
		}
		mi := &MemberInfo{ID: id}
		out[id] = mi
		return mi
	}
	m.fsm.Read(func(s *fsm.State) {
		for _, n := range s.Nodes() {
			mi := get(n.Id)
			mi.HTTP, mi.GRPC, mi.Raft, mi.Gossip = n.HttpAddr, n.GrpcAddr, n.RaftAddr, n.GossipAddr
			mi.Status, mi.Draining, mi.Role, mi.Version = nodeStatus(n.Status), n.Draining, n.Role, n.Version
			var inv Inventory
			if len(n.Inventory) > 0 && json.Unmarshal(n.Inventory, &inv) == nil {
				mi.RTTMicros = inv.RTTMicros
			}
		}
	})
	for id, p := range m.peerSnapshot() {
		mi := get(id)
		if p.meta.HTTP != "" {
			mi.HTTP = p.meta.HTTP
		}
		if p.meta.GRPC != "" {
			mi.GRPC = p.meta.GRPC
		}
		if p.meta.Raft != "" {
			mi.Raft = p.meta.Raft
		}
		mi.Gossip, mi.Status, mi.Draining = p.gossip, p.status, p.meta.Draining
		mi.Role, mi.Version, mi.Backend = p.meta.Role, p.meta.Version, p.meta.Backend
	}
	if f := m.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			mi := get(string(s.ID))
			mi.InRaft = true
			mi.Voter = s.Suffrage == raft.Voter
			if mi.Raft == "" {
				mi.Raft = string(s.Address)
			}
		}
	}
	leader := m.Leader()
	list := make([]MemberInfo, 0, len(out))
	for _, mi := range out {
		mi.Leader = mi.ID == leader && leader != ""
		if mi.Status == "" {
			mi.Status = "unknown"
		}
		list = append(list, *mi)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	return list
}

func nodeStatus(s pb.NodeStatus) string {
	switch s {
	case pb.NodeStatus_NODE_STATUS_ALIVE:
		return StatusAlive
	case pb.NodeStatus_NODE_STATUS_FAILED:
		return StatusFailed
	case pb.NodeStatus_NODE_STATUS_LEFT:
		return StatusLeft
	}
	return "unknown"
}

// Placements returns the replica groups from the local FSM.
func (m *Member) Placements() []*pb.Placement {
	var out []*pb.Placement
	m.fsm.Read(func(s *fsm.State) { out = s.Placements() })
	return out
}

// Sessions returns the sessions live now (local clock, local FSM).
func (m *Member) Sessions() []*pb.Session {
	var out []*pb.Session
	now := time.Now().UnixNano()
	m.fsm.Read(func(s *fsm.State) { out = s.Sessions(now) })
	return out
}

// Session returns one live session from the local FSM.
func (m *Member) Session(id string) (*pb.Session, bool) {
	var (
		se *pb.Session
		ok bool
	)
	now := time.Now().UnixNano()
	m.fsm.Read(func(s *fsm.State) { se, ok = s.Session(id, now) })
	return se, ok
}

// WatchSessions calls fn with every session change applied on this node
// (and a TableAll Reset after a snapshot restore), in log order. fn runs
// on the apply path and must not block. The returned func stops it.
func (m *Member) WatchSessions(fn func(fsm.Change)) (cancel func()) {
	return m.fsm.Subscribe(func(cs []fsm.Change) {
		for _, c := range cs {
			if c.Table == fsm.TableSessions || c.Table == fsm.TableAll {
				fn(c)
			}
		}
	})
}

// ---- GET /admin/api/cluster ----

// StatusDoc is the JSON of GET /admin/api/cluster and `fusion cluster status`.
type StatusDoc struct {
	Self         string          `json:"self"`
	Leader       string          `json:"leader"`
	AppliedIndex uint64          `json:"applied_index"`
	Members      []MemberInfo    `json:"members"`
	Placements   []PlacementInfo `json:"placements"`
}

// PlacementInfo is a replica group in StatusDoc.
type PlacementInfo struct {
	Model      string `json:"model"`
	Replica    uint32 `json:"replica"`
	Generation uint64 `json:"generation"`
	NumLayers  uint32 `json:"num_layers,omitempty"`
	// State of a sharded group's pipeline as this node sees it: ready
	// (every stage ready on a live node), loading, failed (a stage failed
	// to load) or broken (a stage's node is not alive; the planner
	// re-places the group on the live nodes, or logs that it no longer
	// fits them).
	State  string      `json:"state,omitempty"`
	Stages []StageInfo `json:"stages"`
}

// StageInfo is one stage of a replica group.
type StageInfo struct {
	Node   string    `json:"node"`
	Layers [2]uint32 `json:"layers"`
	State  string    `json:"state"`
}

// Status builds the status document from local state.
func (m *Member) Status() StatusDoc {
	doc := StatusDoc{Self: m.cfg.NodeID, Leader: m.Leader(), AppliedIndex: m.fsm.AppliedIndex(),
		Members: m.Members(), Placements: []PlacementInfo{}}
	peers := m.peerSnapshot()
	alive := func(id string) bool {
		p, ok := peers[id]
		return ok && p.status == StatusAlive && !p.meta.Draining
	}
	for _, p := range m.Placements() {
		pi := PlacementInfo{Model: p.Model, Replica: p.Replica, Generation: p.Generation, NumLayers: p.NumLayers}
		if p.NumLayers > 0 {
			pi.State = pipelineState(p, alive)
		}
		for _, st := range p.Stages {
			pi.Stages = append(pi.Stages, StageInfo{Node: st.Node, Layers: [2]uint32{st.LayerStart, st.LayerEnd}, State: stageState(st.State)})
		}
		doc.Placements = append(doc.Placements, pi)
	}
	return doc
}

func stageState(s pb.StageState) string {
	switch s {
	case pb.StageState_STAGE_STATE_ASSIGNED:
		return "assigned"
	case pb.StageState_STAGE_STATE_LOADING:
		return "loading"
	case pb.StageState_STAGE_STATE_READY:
		return "ready"
	case pb.StageState_STAGE_STATE_DRAINING:
		return "draining"
	case pb.StageState_STAGE_STATE_EVICTED:
		return "evicted"
	case pb.StageState_STAGE_STATE_FAILED:
		return "failed"
	case pb.StageState_STAGE_STATE_UNAVAILABLE:
		return "unavailable"
	}
	return "unknown"
}

// AdminPath is where AdminHandler expects to be mounted (and, for
// settings, everything under it).
const AdminPath = "/admin/api/cluster"

// AdminHandler serves, behind the admin auth:
//
//	GET /admin/api/cluster                  the status document
//	GET /admin/api/cluster/settings/{key}   {"key","value","version"}
//	PUT /admin/api/cluster/settings/{key}   {"value", "expect_version"?} → CAS write
//	GET /admin/api/cluster/backup           a consistent backup (octet stream)
//	POST /admin/api/cluster/restore[?force] restores a backup (the body); leader only
//	GET  /admin/api/cluster/nodes/{id}/drain  the node's drain record
//	POST /admin/api/cluster/nodes/{id}/drain  asks the node to drain (202 + record)
//	POST /admin/api/cluster/nodes/{id}/undrain  takes it back
//
// Settings under KeyPrefix (the cluster's keys) and the MCP configuration
// (fsm.MCPConfigKey: secrets; /admin/api/mcp/servers serves it) are a 403.
//
// ?consistent on a GET first waits for a linearizable read index. No
// leader → 503 + Retry-After; CAS mismatch → 409 with current_version.
func (m *Member) AdminHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := m.Stats()
		w.Header().Set("X-Fusion-Index", itoa(st.AppliedIndex))
		w.Header().Set("X-Fusion-Last-Contact", st.LastContact.String())
		rest, ok := strings.CutPrefix(r.URL.Path, AdminPath)
		switch {
		case ok && (rest == "" || rest == "/"):
			if !allow(w, r, http.MethodGet, http.MethodHead) || !m.consistent(w, r) {
				return
			}
			writeJSON(w, http.StatusOK, m.Status())
		case ok && strings.HasPrefix(rest, "/settings/") && len(rest) > len("/settings/"):
			m.serveSetting(w, r, strings.TrimPrefix(rest, "/settings/"))
		case ok && rest == "/backup":
			m.serveBackup(w, r)
		case ok && rest == "/restore":
			m.serveRestore(w, r)
		case ok && strings.HasPrefix(rest, "/nodes/"):
			m.serveDrain(w, r, strings.TrimPrefix(rest, "/nodes/"))
		default:
			writeJSONError(w, http.StatusNotFound, "not found: "+r.URL.Path)
		}
	})
}

func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	if slices.Contains(methods, r.Method) {
		return true
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	writeJSONError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed")
	return false
}

func (m *Member) consistent(w http.ResponseWriter, r *http.Request) bool {
	if _, ok := r.URL.Query()["consistent"]; !ok {
		return true
	}
	if err := m.ConsistentRead(r.Context()); err != nil {
		w.Header().Set("Retry-After", "1")
		writeJSONError(w, http.StatusServiceUnavailable, "no consistent read: "+err.Error())
		return false
	}
	return true
}

// SettingDoc is a setting over HTTP.
type SettingDoc struct {
	Key     string `json:"key"`
	Value   string `json:"value"`
	Version uint64 `json:"version"`
}

func (m *Member) serveSetting(w http.ResponseWriter, r *http.Request, key string) {
	if strings.HasPrefix(key, KeyPrefix) {
		// The cluster's keys stay inside it: reading one would let a
		// client forge what it signs.
		writeJSONError(w, http.StatusForbidden, "setting "+strconv.Quote(key)+" is one of the cluster's keys: not readable or writable here")
		return
	}
	if key == fsm.MCPConfigKey {
		// Its env and headers hold secrets, shown masked by
		// /admin/api/mcp/servers, which also checks what is written.
		writeJSONError(w, http.StatusForbidden, "setting "+strconv.Quote(key)+" is the MCP configuration: use /admin/api/mcp/servers")
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if !m.consistent(w, r) {
			return
		}
		var (
			s  *pb.Setting
			ok bool
		)
		m.fsm.Read(func(st *fsm.State) { s, ok = st.Setting(key) })
		if !ok {
			writeJSONError(w, http.StatusNotFound, "no setting "+strconv.Quote(key))
			return
		}
		writeJSON(w, http.StatusOK, SettingDoc{Key: key, Value: string(s.Value), Version: s.Version})
	case http.MethodPut:
		var body struct {
			Value         *string `json:"value"`
			ExpectVersion *uint64 `json:"expect_version"`
		}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, int64(m.cfg.MaxCommandBytes)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil || body.Value == nil {
			writeJSONError(w, http.StatusBadRequest, "body must be {\"value\": string, \"expect_version\"?: integer}")
			return
		}
		cmd := &pb.SettingPut{Key: key, Value: []byte(*body.Value)}
		if body.ExpectVersion != nil {
			cmd.Cas, cmd.ExpectVersion = true, *body.ExpectVersion
		}
		res, err := m.Apply(r.Context(), cmd)
		var fe *fsm.Error
		switch {
		case err == nil:
			writeJSON(w, http.StatusOK, SettingDoc{Key: key, Value: *body.Value, Version: res.Value})
		case errors.As(err, &fe) && fe.Code == fsm.CodeConflict:
			writeJSON(w, http.StatusConflict, map[string]any{
				"error":           map[string]string{"message": fe.Error(), "type": "conflict"},
				"current_version": fe.CurrentIndex,
			})
		case errors.Is(err, ErrCommandTooLarge):
			writeJSONError(w, http.StatusRequestEntityTooLarge, err.Error())
		case errors.As(err, &fe):
			writeJSONError(w, http.StatusBadRequest, err.Error())
		default:
			w.Header().Set("Retry-After", "1")
			writeJSONError(w, http.StatusServiceUnavailable, err.Error())
		}
	default:
		allow(w, r, http.MethodGet, http.MethodHead, http.MethodPut)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeJSONError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"message": msg, "type": "cluster_error"}})
}

func itoa(v uint64) string {
	b, _ := json.Marshal(v)
	return string(b)
}
