package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
)

// KeyPrefix names the settings that hold the cluster's generated keys.
// The admin settings API neither shows nor changes them.
const KeyPrefix = "fusion.key/"

// KeyLen is the length of a cluster key in bytes.
const KeyLen = 32

// Key returns the cluster-wide key called name: the same on every member
// and across restarts. With a cluster secret it is derived from the
// secret (no write, available without a leader). Without one it is
// KeyLen random bytes kept in the replicated setting KeyPrefix+name: the
// first member that asks proposes them through the leader as a
// create-if-absent write, so exactly one proposal is committed and every
// member reads that one. Without a secret, a member that has never
// reached a leader has no key yet: the error is the write's (ErrNoLeader
// after the hold timeout, or the context's).
func (m *Member) Key(ctx context.Context, name string) ([]byte, error) {
	if m.auth != nil {
		return m.auth.key(name), nil
	}
	setting := KeyPrefix + name
	if k, ok, err := m.readKey(setting); ok || err != nil {
		return k, err
	}
	fresh := make([]byte, KeyLen)
	_, _ = rand.Read(fresh) // never fails: crypto/rand crashes the program rather than return an error
	_, err := m.Apply(ctx, &pb.SettingPut{Key: setting, Value: []byte(hex.EncodeToString(fresh)), Cas: true})
	var fe *fsm.Error
	switch {
	case err == nil:
		return fresh, nil
	case errors.As(err, &fe) && fe.Code == fsm.CodeConflict:
		// Another member's proposal won: read it once applied here.
		if err := m.fsm.WaitApplied(ctx, fe.CurrentIndex); err != nil {
			return nil, fmt.Errorf("cluster: key %q: %w", name, err)
		}
		k, ok, err := m.readKey(setting)
		if !ok && err == nil {
			err = fmt.Errorf("cluster: key %q: deleted after it was written", name)
		}
		return k, err
	}
	return nil, fmt.Errorf("cluster: key %q: %w", name, err)
}

// readKey reads a generated key from the local replicated state.
func (m *Member) readKey(setting string) (key []byte, ok bool, err error) {
	var s *pb.Setting
	m.fsm.Read(func(st *fsm.State) { s, ok = st.Setting(setting) })
	if !ok {
		return nil, false, nil
	}
	if key, err = hex.DecodeString(string(s.Value)); err != nil || len(key) != KeyLen {
		return nil, true, fmt.Errorf("cluster: setting %q does not hold a %d-byte hex key", setting, KeyLen)
	}
	return key, true, nil
}
