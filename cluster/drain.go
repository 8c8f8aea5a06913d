package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"time"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
)

// DrainPrefix starts the setting keys of drain requests:
// "drain/<node id>" → DrainRecord as JSON. The record is the operator's
// wish (Drain) and the node's answer (State): the named node follows it
// (node.Node's drain loop), so a drain asked on any node reaches it, and a
// node drained for maintenance stays drained across its restart until it
// is undrained.
const DrainPrefix = "drain/"

// Drain states a node writes into its record.
const (
	DrainStateDraining = "draining" // asked; requests still in flight, leadership or placements still here
	DrainStateDrained  = "drained"  // nothing runs here: safe to stop
)

// DrainRecord is one node's drain request and progress.
//
// Mixed versions: a record is read-modify-written by whichever build
// handles the request, so fields a build does not know are kept as they
// came (Unknown) and written back unchanged; a newer build's field
// survives an older build's undrain. DrainNext holds the fields only a
// build with the fusion_next tag knows (the rolling-upgrade test's "new
// replicated field").
type DrainRecord struct {
	Node  string `json:"node"`
	Drain bool   `json:"drain"`
	// State is "", draining or drained (written by the node itself).
	State string `json:"state,omitempty"`
	// Since is when the drain was asked (unix milliseconds, the asking
	// node's clock).
	Since int64 `json:"since,omitempty"`
	DrainNext
	// Unknown are the fields of a newer build, kept as they came.
	Unknown map[string]json.RawMessage `json:"-"`
}

// drainFields are the JSON names DrainRecord knows in this build.
var drainFields = jsonFieldNames(reflect.TypeFor[DrainRecord]())

// jsonFieldNames lists the JSON names of t's exported fields, embedded
// structs' included.
func jsonFieldNames(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct {
			for k := range jsonFieldNames(f.Type) {
				out[k] = true
			}
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = true
	}
	return out
}

// UnmarshalJSON decodes the known fields and keeps the others in Unknown.
func (r *DrainRecord) UnmarshalJSON(b []byte) error {
	type plain DrainRecord
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	*r = DrainRecord(p)
	r.Unknown = nil
	for k, v := range all {
		if !drainFields[k] {
			if r.Unknown == nil {
				r.Unknown = map[string]json.RawMessage{}
			}
			r.Unknown[k] = v
		}
	}
	return nil
}

// MarshalJSON writes the known fields and Unknown back as they came.
func (r DrainRecord) MarshalJSON() ([]byte, error) {
	type plain DrainRecord
	b, err := json.Marshal(plain(r))
	if err != nil || len(r.Unknown) == 0 {
		return b, err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, err
	}
	for k, v := range r.Unknown {
		if !drainFields[k] {
			all[k] = v
		}
	}
	return json.Marshal(all)
}

// ErrUnknownNode is the error of a drain of a node the catalog does not
// hold.
var ErrUnknownNode = errors.New("cluster: unknown node")

// Drain returns node's drain record from the local state and its setting
// version (0 and a zero record when it was never drained).
func (m *Member) Drain(node string) (DrainRecord, uint64) {
	var (
		s  *pb.Setting
		ok bool
	)
	m.fsm.Read(func(st *fsm.State) { s, ok = st.Setting(DrainPrefix + node) })
	rec := DrainRecord{Node: node}
	if !ok {
		return rec, 0
	}
	if err := json.Unmarshal(s.Value, &rec); err != nil {
		m.log.Warn("drain record unreadable", "node", node, "err", err)
		return DrainRecord{Node: node}, s.Version
	}
	rec.Node = node
	return rec, s.Version
}

// UpdateDrain read-modify-writes node's drain record with a CAS on its
// version, retrying a conflict: change edits the record (fields it does
// not touch, a newer build's included, are written back unchanged) and
// reports whether anything changed (false: nothing is written).
func (m *Member) UpdateDrain(ctx context.Context, node string, change func(*DrainRecord) bool) (DrainRecord, error) {
	for {
		rec, version := m.Drain(node)
		if !change(&rec) {
			return rec, nil
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return rec, err
		}
		_, err = m.Apply(ctx, &pb.SettingPut{Key: DrainPrefix + node, Value: b, Cas: true, ExpectVersion: version})
		if !errors.Is(err, fsm.ErrConflict) {
			return rec, err
		}
		// Another write won: wait until this node has applied it.
		if err := m.ConsistentRead(ctx); err != nil {
			return rec, err
		}
	}
}

// knownNode reports whether the catalog holds node.
func (m *Member) knownNode(id string) bool {
	ok := false
	m.fsm.Read(func(s *fsm.State) {
		for _, n := range s.Nodes() {
			ok = ok || n.Id == id
		}
	})
	return ok
}

// TransferLeadership hands leadership to another voter when this node
// leads and is not alone; it reports whether it led.
func (m *Member) TransferLeadership() (bool, error) {
	if !m.IsLeader() || len(m.voters()) < 2 {
		return false, nil
	}
	return true, m.raft.LeadershipTransfer().Error()
}

// serveDrain serves GET|POST /admin/api/cluster/nodes/{id}/drain and POST
// …/undrain (rest is "{id}/drain" or "{id}/undrain").
func (m *Member) serveDrain(w http.ResponseWriter, r *http.Request, rest string) {
	id, action, ok := strings.Cut(rest, "/")
	if !ok || id == "" || (action != "drain" && action != "undrain") {
		writeJSONError(w, http.StatusNotFound, "not found: "+r.URL.Path)
		return
	}
	if !m.knownNode(id) {
		writeJSONError(w, http.StatusNotFound, fmt.Sprintf("no node %q in this cluster", id))
		return
	}
	if action == "drain" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		if !m.consistent(w, r) {
			return
		}
		rec, _ := m.Drain(id)
		writeJSON(w, http.StatusOK, rec)
		return
	}
	methods := []string{http.MethodPost}
	if action == "drain" {
		methods = append(methods, http.MethodGet, http.MethodHead)
	}
	if !allow(w, r, methods...) {
		return
	}
	var next DrainNext
	if action == "drain" {
		// An optional body sets the fields only some builds know.
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&next); err != nil && !errors.Is(err, io.EOF) {
			writeJSONError(w, http.StatusBadRequest, "body must be empty or a JSON object with the drain's options: "+err.Error())
			return
		}
	}
	now := time.Now().UnixMilli()
	rec, err := m.UpdateDrain(r.Context(), id, func(rec *DrainRecord) bool {
		if action == "undrain" {
			if !rec.Drain && rec.State == "" {
				return false
			}
			rec.Drain, rec.State, rec.Since = false, "", 0
			return true
		}
		next.apply(rec)
		if rec.Drain {
			return next.set()
		}
		rec.Drain, rec.State, rec.Since = true, DrainStateDraining, now
		return true
	})
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeJSONError(w, http.StatusServiceUnavailable, "drain not recorded: "+err.Error())
		return
	}
	writeJSON(w, http.StatusAccepted, rec)
}

// Draining reports whether this node gossips itself draining.
func (m *Member) Draining() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.meta.Draining
}
