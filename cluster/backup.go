package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/hashicorp/raft"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
)

// Backup and restore: a backup is the replicated state in the FSM's
// snapshot encoding (placements, sessions, API keys, settings, the node
// catalog), taken after a linearizable read so it holds every write
// acknowledged before the call. Restore installs a backup's data into a
// running cluster through raft's user-snapshot restore, which reaches every
// member (followers by InstallSnapshot) without going through the log and
// its command size limit.

// ErrNotLeader: the call needs the leader; Leader names it.
var ErrNotLeader = errors.New("cluster: not the leader")

// ErrHasData: a restore into a cluster that already holds data, without
// force.
var ErrHasData = errors.New("cluster: this cluster already holds data (placements, sessions, keys or settings); restore into a new cluster, or force it")

// Backup writes a consistent copy of the replicated state to w and
// returns the applied index it was taken at.
func (m *Member) Backup(ctx context.Context, w io.Writer) (uint64, error) {
	if err := m.ConsistentRead(ctx); err != nil {
		return 0, err
	}
	var (
		buf   bytes.Buffer
		index uint64
		err   error
	)
	// Encoded under the read lock into memory, written to w after: a slow
	// reader of w must not hold up the FSM.
	m.fsm.Read(func(s *fsm.State) {
		index = s.AppliedIndex()
		_, err = s.WriteTo(&buf)
	})
	if err != nil {
		return 0, fmt.Errorf("cluster: backup: %w", err)
	}
	if _, err := buf.WriteTo(w); err != nil {
		return 0, fmt.Errorf("cluster: backup: %w", err)
	}
	return index, nil
}

// Restore replaces the cluster's placements, sessions, API keys and
// settings with those of the backup r, keeping the cluster's id and its
// node catalog (the members running it). Only the leader restores
// (ErrNotLeader). A cluster that already holds data refuses (ErrHasData)
// unless force. Every member has the restored data when it returns.
func (m *Member) Restore(ctx context.Context, r io.Reader, force bool) error {
	if m.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	// Read first: a slow sender must not hold the FSM's lock.
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	timeout := time.Minute
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	// A leader fresh from its election may not have applied its own
	// configuration entry (or the nodes' joins) yet, and raft refuses a
	// restore until it has: the barrier waits for everything before it to
	// be applied, so the node catalog kept below is the current one.
	if err := m.raft.Barrier(timeout).Error(); err != nil {
		return fmt.Errorf("cluster: restore: waiting for the log to be applied: %w", err)
	}
	var (
		next    *fsm.State
		hasData bool
	)
	m.fsm.Read(func(s *fsm.State) {
		hasData = s.HasData(KeyPrefix)
		if !hasData || force {
			next, err = fsm.ForRestore(bytes.NewReader(data), s)
		}
	})
	if hasData && !force {
		return ErrHasData
	}
	if err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	var snap bytes.Buffer
	if _, err := next.WriteTo(&snap); err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Size: int64(snap.Len())}
	if err := m.raft.Restore(meta, &snap, timeout); err != nil {
		return fmt.Errorf("cluster: restore: %w", err)
	}
	// raft applies no-ops outside the FSM: a command through the log moves
	// the applied index past the restore, so linearizable reads (which
	// wait for it) go on working, and records when the restore happened.
	if _, err := m.Apply(ctx, &pb.SettingPut{Key: RestoredSetting, Value: []byte(time.Now().UTC().Format(time.RFC3339))}); err != nil {
		return fmt.Errorf("cluster: restored, but the marker write failed: %w", err)
	}
	return nil
}

// RestoredSetting records when the cluster was last restored from a
// backup.
const RestoredSetting = "fusion.restored_at"

// MaxRestoreBytes bounds a backup posted to /admin/api/cluster/restore.
const MaxRestoreBytes = 1 << 30

// BackupContentType is the media type of a backup over HTTP.
const BackupContentType = "application/vnd.fusion.backup"

func (m *Member) serveBackup(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	var buf bytes.Buffer
	index, err := m.Backup(r.Context(), &buf)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeJSONError(w, http.StatusServiceUnavailable, "no consistent backup: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", BackupContentType)
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="fusion-backup-%d.fsb"`, index))
	w.Header().Set("X-Fusion-Backup-Index", itoa(index))
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	_, _ = buf.WriteTo(w)
}

// serveRestore restores the request body. A follower answers 421 with the
// leader's HTTP address ("leader"), where the client sends it again.
func (m *Member) serveRestore(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodPost) {
		return
	}
	_, force := r.URL.Query()["force"]
	err := m.Restore(r.Context(), http.MaxBytesReader(w, r.Body, MaxRestoreBytes), force)
	switch {
	case errors.As(err, new(*http.MaxBytesError)):
		writeJSONError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("a backup over HTTP is at most %d bytes", MaxRestoreBytes))
	case err == nil:
		writeJSON(w, http.StatusOK, map[string]any{"restored": true, "applied_index": m.fsm.AppliedIndex()})
	case errors.Is(err, ErrNotLeader):
		leader := m.Leader()
		var url string
		for _, mi := range m.Members() {
			if mi.ID == leader {
				url = mi.HTTP
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusMisdirectedRequest)
		_ = json.NewEncoder(w).Encode(map[string]any{
			"error":  map[string]string{"message": "restore on the leader: " + leader, "type": "cluster_error"},
			"leader": url,
		})
	case errors.Is(err, ErrHasData):
		writeJSONError(w, http.StatusConflict, err.Error())
	case errors.Is(err, fsm.ErrNotSnapshot):
		writeJSONError(w, http.StatusBadRequest, "not a fusion backup: "+err.Error())
	default:
		writeJSONError(w, http.StatusInternalServerError, err.Error())
	}
}
