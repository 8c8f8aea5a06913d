package fsm

import (
	"errors"
	"fmt"
	"io"
	"strings"

	pb "fusion/cluster/clusterpb"
)

// ErrNotSnapshot: a backup that does not decode.
var ErrNotSnapshot = errors.New("fsm: not a valid snapshot")

// ForRestore is what restoring backup into the cluster whose state is
// current installs: the backup's placements, sessions, API keys, settings
// and dedup table under the current cluster's identity — its node catalog and
// its applied index — so the members running the cluster stay
// what they are and only the data comes back.
func ForRestore(backup io.Reader, current *State) (*State, error) {
	s, err := ReadState(backup, current.dedupSize)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotSnapshot, err)
	}
	s.clusterID, s.applied = current.clusterID, current.applied
	s.nodes = make(map[string]*pb.Node, len(current.nodes))
	for k, v := range current.nodes {
		s.nodes[k] = v
	}
	// The panel's sign-ins are the running cluster's too: the admin who
	// restores stays signed in, and a backup's old sessions stay out.
	s.panel = make(map[string]*pb.PanelSession, len(current.panel))
	for k, v := range current.panel {
		s.panel[k] = v
	}
	return s, nil
}

// HasData says whether s holds anything a restore would replace:
// placements, sessions, API keys, or settings outside except (the prefix
// of settings a new cluster writes on its own, its keys).
func (s *State) HasData(except string) bool {
	if len(s.placements) > 0 || len(s.sessions) > 0 || len(s.apiKeys) > 0 {
		return true
	}
	for k := range s.settings {
		if except == "" || !strings.HasPrefix(k, except) {
			return true
		}
	}
	return false
}
