package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"fusion/cluster"
	"fusion/internal/atomicfile"
	"fusion/router/anthropic"
)

// thinkingKeyName names the key Anthropic thinking blocks are signed with.
const thinkingKeyName = "thinking"

// thinkingKey is where the Anthropic dialect takes the key it signs
// thinking blocks with: the cluster's (Member.Key) for a member, so a
// block signed on one node verifies on every other; for a lone node, a
// key kept in its data directory (keys/thinking), so signatures outlive a
// restart; with neither, a random key for the life of the process.
func (n *Node) thinkingKey() (anthropic.KeySource, error) {
	if n.cfg.Cluster.Enabled() {
		return func(ctx context.Context) ([]byte, error) { return n.member.Key(ctx, thinkingKeyName) }, nil
	}
	if n.cfg.DataDir == "" {
		return anthropic.RandomKey(), nil
	}
	key, err := localKey(filepath.Join(n.cfg.DataDir, "keys"), thinkingKeyName)
	if err != nil {
		return nil, err
	}
	return func(context.Context) ([]byte, error) { return key, nil }, nil
}

// localKey reads the key dir/name (hex), creating it with
// cluster.KeyLen random bytes, readable by the owner only, when missing.
func localKey(dir, name string) ([]byte, error) {
	path := filepath.Join(dir, name)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key := make([]byte, cluster.KeyLen)
		_, _ = rand.Read(key) // never fails: crypto/rand crashes the program rather than return an error
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("node: key %s: %w", name, err)
		}
		err := atomicfile.WriteMode(path, 0o600, func(w io.Writer) error {
			_, err := io.WriteString(w, hex.EncodeToString(key)+"\n")
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("node: key %s: %w", name, err)
		}
		return key, nil
	}
	if err != nil {
		return nil, fmt.Errorf("node: key %s: %w", name, err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != cluster.KeyLen {
		return nil, fmt.Errorf("node: key %s: %s does not hold a %d-byte hex key", name, path, cluster.KeyLen)
	}
	return key, nil
}
