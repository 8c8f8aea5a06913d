package fsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"

	"google.golang.org/protobuf/proto"

	pb "fusion/cluster/clusterpb"
)

// Snapshot format: the magic, then frames of [record type byte][uvarint
// length][protobuf record]; the first frame is the header and the last is
// recEnd. Records are written in a canonical order (sorted keys, dedup
// oldest first), so two equal states give equal bytes.
const (
	snapshotMagic   = "FUSIONFSM"
	snapshotVersion = 1

	recHeader    byte = 1
	recNode      byte = 2
	recPlacement byte = 3
	recSession   byte = 4
	recAPIKey    byte = 5
	recSetting   byte = 6
	recDedup     byte = 7
	recJob       byte = 31 // numbered apart: other records are being added after 7
	// 34: the admin panel's sessions (the number of their command, so
	// record types added at the same time elsewhere do not collide).
	recPanelSession byte = 34
	recProfile      byte = 36 // the number of its command, as above
	recEnd          byte = 0xFF
)

// MaxSnapshotRecord bounds one snapshot record (a session with a long
// history is the largest).
const MaxSnapshotRecord = 64 << 20

// WriteTo writes the state's snapshot encoding to w.
func (s *State) WriteTo(w io.Writer) (int64, error) {
	bw := bufio.NewWriter(w)
	cw := &countWriter{w: bw}
	if _, err := io.WriteString(cw, snapshotMagic); err != nil {
		return cw.n, err
	}
	opts := proto.MarshalOptions{Deterministic: true}
	var buf []byte
	frame := func(t byte, m proto.Message) error {
		var err error
		buf, err = opts.MarshalAppend(buf[:0], m)
		if err != nil {
			return err
		}
		var hdr [1 + binary.MaxVarintLen64]byte
		hdr[0] = t
		n := binary.PutUvarint(hdr[1:], uint64(len(buf)))
		if _, err := cw.Write(hdr[:1+n]); err != nil {
			return err
		}
		_, err = cw.Write(buf)
		return err
	}
	if err := frame(recHeader, &pb.SnapshotHeader{Version: snapshotVersion, ClusterId: s.clusterID, AppliedIndex: s.applied}); err != nil {
		return cw.n, err
	}
	for _, k := range sortedKeys(s.nodes) {
		if err := frame(recNode, s.nodes[k]); err != nil {
			return cw.n, err
		}
	}
	for _, k := range sortedKeys(s.placements) {
		if err := frame(recPlacement, s.placements[k]); err != nil {
			return cw.n, err
		}
	}
	for _, k := range sortedKeys(s.sessions) {
		if err := frame(recSession, s.sessions[k]); err != nil {
			return cw.n, err
		}
	}
	for _, k := range sortedKeys(s.apiKeys) {
		if err := frame(recAPIKey, s.apiKeys[k]); err != nil {
			return cw.n, err
		}
	}
	for _, k := range sortedKeys(s.settings) {
		if err := frame(recSetting, s.settings[k]); err != nil {
			return cw.n, err
		}
	}
	for _, k := range sortedKeys(s.panel) {
		if err := frame(recPanelSession, s.panel[k]); err != nil {
			return cw.n, err
		}
	}
	for _, k := range sortedKeys(s.jobs) {
		if err := frame(recJob, s.jobs[k]); err != nil {
			return cw.n, err
		}
	}
	for _, k := range sortedKeys(s.profiles) {
		if err := frame(recProfile, s.profiles[k]); err != nil {
			return cw.n, err
		}
	}
	for _, id := range s.dedupOrder() {
		if err := frame(recDedup, s.dedup[id]); err != nil {
			return cw.n, err
		}
	}
	if _, err := cw.Write([]byte{recEnd}); err != nil {
		return cw.n, err
	}
	return cw.n, bw.Flush()
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// ReadState decodes a snapshot written by WriteTo into fresh state.
func ReadState(r io.Reader, dedupSize int) (*State, error) {
	br := bufio.NewReader(r)
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != snapshotMagic {
		return nil, fmt.Errorf("fsm: not a fusion snapshot (%v)", err)
	}
	s := NewState(dedupSize)
	var dedup []*pb.DedupEntry
	first := true
	for {
		t, err := br.ReadByte()
		if err != nil {
			return nil, fmt.Errorf("fsm: snapshot truncated: %w", err)
		}
		if t == recEnd {
			break
		}
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return nil, fmt.Errorf("fsm: snapshot frame: %w", err)
		}
		if n > MaxSnapshotRecord {
			return nil, fmt.Errorf("fsm: snapshot record of %d bytes exceeds %d", n, MaxSnapshotRecord)
		}
		buf, err := io.ReadAll(io.LimitReader(br, int64(n)))
		if err != nil || uint64(len(buf)) != n {
			return nil, fmt.Errorf("fsm: snapshot truncated (%v)", err)
		}
		if first != (t == recHeader) {
			return nil, errors.New("fsm: snapshot header must come first, once")
		}
		first = false
		if t == recHeader {
			h := new(pb.SnapshotHeader)
			if err := proto.Unmarshal(buf, h); err != nil {
				return nil, fmt.Errorf("fsm: snapshot header: %w", err)
			}
			if h.Version != snapshotVersion {
				return nil, fmt.Errorf("fsm: snapshot version %d, want %d", h.Version, snapshotVersion)
			}
			s.clusterID, s.applied = h.ClusterId, h.AppliedIndex
			continue
		}
		if err := s.restoreRecord(t, buf, &dedup); err != nil {
			return nil, err
		}
	}
	if first {
		return nil, errors.New("fsm: snapshot has no header")
	}
	// Keep the newest entries if this replica remembers fewer.
	if len(dedup) > s.dedupSize {
		dedup = dedup[len(dedup)-s.dedupSize:]
	}
	for _, e := range dedup {
		s.remember(e)
	}
	return s, nil
}

func (s *State) restoreRecord(t byte, buf []byte, dedup *[]*pb.DedupEntry) error {
	var err error
	switch t {
	case recNode:
		v := new(pb.Node)
		if err = proto.Unmarshal(buf, v); err == nil {
			s.nodes[v.Id] = v
		}
	case recPlacement:
		v := new(pb.Placement)
		if err = proto.Unmarshal(buf, v); err == nil {
			s.placements[PlacementKey(v.Model, v.Replica)] = v
		}
	case recSession:
		v := new(pb.Session)
		if err = proto.Unmarshal(buf, v); err == nil {
			s.sessions[v.Id] = v
		}
	case recAPIKey:
		v := new(pb.APIKey)
		if err = proto.Unmarshal(buf, v); err == nil {
			s.apiKeys[v.Id] = v
		}
	case recSetting:
		v := new(pb.Setting)
		if err = proto.Unmarshal(buf, v); err == nil {
			s.settings[v.Key] = v
		}
	case recPanelSession:
		v := new(pb.PanelSession)
		if err = proto.Unmarshal(buf, v); err == nil {
			s.panel[string(v.Hash)] = v
		}
	case recJob:
		v := new(pb.Job)
		if err = proto.Unmarshal(buf, v); err == nil {
			s.jobs[v.Id] = v
		}
	case recProfile:
		v := new(pb.Profile)
		if err = proto.Unmarshal(buf, v); err == nil {
			s.profiles[profileKey(v.Model, v.Node, v.Kind)] = v
		}
	case recDedup:
		v := new(pb.DedupEntry)
		if err = proto.Unmarshal(buf, v); err == nil {
			*dedup = append(*dedup, v)
		}
	default:
		// Removed record types keep a no-op case here (COMPAT).
		return fmt.Errorf("fsm: unknown snapshot record type %d", t)
	}
	if err != nil {
		return fmt.Errorf("fsm: snapshot record type %d: %w", t, err)
	}
	return nil
}

// ---- reads (the caller holds whatever lock guards s) ----

func sortedValues[V any](m map[string]V, keep func(V) bool) []V {
	out := make([]V, 0, len(m))
	for _, k := range sortedKeys(m) {
		if keep == nil || keep(m[k]) {
			out = append(out, m[k])
		}
	}
	return out
}

func cloneAll[V proto.Message](in []V) []V {
	for i, v := range in {
		in[i] = proto.Clone(v).(V)
	}
	return in
}

// Nodes returns the catalog sorted by id.
func (s *State) Nodes() []*pb.Node { return cloneAll(sortedValues(s.nodes, nil)) }

// Node returns one node.
func (s *State) Node(id string) (*pb.Node, bool) {
	n, ok := s.nodes[id]
	if !ok {
		return nil, false
	}
	return proto.Clone(n).(*pb.Node), true
}

// Placements returns the replica groups sorted by model and replica.
func (s *State) Placements() []*pb.Placement {
	out := cloneAll(sortedValues(s.placements, nil))
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Model != out[j].Model {
			return out[i].Model < out[j].Model
		}
		return out[i].Replica < out[j].Replica
	})
	return out
}

// Sessions returns the sessions live at now (unix nanoseconds), by id.
func (s *State) Sessions(now int64) []*pb.Session {
	return cloneAll(sortedValues(s.sessions, func(se *pb.Session) bool { return live(se, now) }))
}

// AllSessions returns every stored session, expired ones included.
func (s *State) AllSessions() []*pb.Session { return cloneAll(sortedValues(s.sessions, nil)) }

// Session returns a session live at now.
func (s *State) Session(id string, now int64) (*pb.Session, bool) {
	se, ok := s.sessions[id]
	if !ok || !live(se, now) {
		return nil, false
	}
	return proto.Clone(se).(*pb.Session), true
}

// APIKeys returns the API keys sorted by id.
func (s *State) APIKeys() []*pb.APIKey { return cloneAll(sortedValues(s.apiKeys, nil)) }

// Setting returns one setting.
func (s *State) Setting(key string) (*pb.Setting, bool) {
	v, ok := s.settings[key]
	if !ok {
		return nil, false
	}
	return proto.Clone(v).(*pb.Setting), true
}

// Settings returns every setting sorted by key.
func (s *State) Settings() []*pb.Setting { return cloneAll(sortedValues(s.settings, nil)) }

// NextExpiry is the earliest expiry among stored sessions (0 if none).
func (s *State) NextExpiry() int64 {
	var min int64
	for _, se := range s.sessions {
		if min == 0 || se.ExpiresUnixNano < min {
			min = se.ExpiresUnixNano
		}
	}
	return min
}
