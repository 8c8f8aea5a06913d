package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"fusion/internal/atomicfile"
)

// Scope names a group of routes a sub-key may call.
type Scope string

// The scopes, one per route group (ScopeOf maps every route to one).
const (
	ScopeInference  Scope = "inference"  // chat, completions, messages, responses, models, tokenize
	ScopeEmbeddings Scope = "embeddings" // /v1/embeddings, /v1/rerank
	ScopeAudio      Scope = "audio"      // /v1/audio
	ScopeImages     Scope = "images"     // /v1/images
	ScopeMCP        Scope = "mcp"        // /v1/mcp, /mcp
	ScopeAgent      Scope = "agent"      // OpenClaw
	ScopeAdminRead  Scope = "admin-read" // GET of /admin, /metrics
	ScopeAdmin      Scope = "admin"      // every admin route
)

// Scopes lists every scope.
var Scopes = []Scope{ScopeInference, ScopeEmbeddings, ScopeAudio, ScopeImages, ScopeMCP, ScopeAgent, ScopeAdminRead, ScopeAdmin}

// ValidScope reports whether s names a scope.
func ValidScope(s string) bool { return slices.Contains(Scopes, Scope(s)) }

// Key is a sub-key as stored: never the secret, only its SHA-256.
type Key struct {
	ID     string
	Name   string
	Prefix string // the secret's first characters, to tell keys apart
	Hash   [sha256.Size]byte
	Scopes []Scope
	Models []string // allowed models; empty: any
	// Rate limits per minute, cluster-wide (0: unlimited).
	RequestsPerMin int64
	TokensPerMin   int64
	Created        time.Time
	Expires        time.Time // zero: never
	Revoked        time.Time // zero: live
}

// Has reports whether the key carries scope s; admin implies admin-read.
func (k *Key) Has(s Scope) bool {
	return slices.Contains(k.Scopes, s) || (s == ScopeAdminRead && slices.Contains(k.Scopes, ScopeAdmin))
}

// AllowsModel reports whether the key may use model.
func (k *Key) AllowsModel(model string) bool {
	return len(k.Models) == 0 || slices.Contains(k.Models, model)
}

// Expired reports whether the key has expired at now.
func (k *Key) Expired(now time.Time) bool { return !k.Expires.IsZero() && !now.Before(k.Expires) }

// ErrNotFound is the error of an unknown or already revoked key id.
var ErrNotFound = errors.New("auth: no such key")

// Store keeps the sub-keys. Lookup runs on every request and must not
// block (a local read); Put and Revoke may go through the cluster.
type Store interface {
	// Lookup finds the key whose secret hashes to hash, revoked or not.
	Lookup(hash [sha256.Size]byte) (Key, bool)
	// List returns the keys not revoked, sorted by id.
	List() []Key
	// Put stores a new key; it is in force on this node when Put returns.
	Put(ctx context.Context, k Key) error
	// Revoke revokes the key id (ErrNotFound when unknown or revoked);
	// the revocation is in force on this node when it returns.
	Revoke(ctx context.Context, id string, now time.Time) error
}

// KeyPrefix starts every sub-key's secret.
const KeyPrefix = "fsk-"

// NewSecret makes a sub-key's secret (KeyPrefix + 256 random bits) and
// its id.
func NewSecret() (id, secret string) {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails: crypto/rand crashes the program rather than return an error
	idb := make([]byte, 8)
	_, _ = rand.Read(idb)
	return "key_" + hex.EncodeToString(idb), KeyPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// Hash is the stored form of a secret.
func Hash(secret string) [sha256.Size]byte { return sha256.Sum256([]byte(secret)) }

// equalHash compares two hashes in constant time.
func equalHash(a, b [sha256.Size]byte) bool { return subtle.ConstantTimeCompare(a[:], b[:]) == 1 }

// MemStore is a Store in memory: a node without a cluster. Opened with
// OpenFileStore, it also keeps its keys (hashes only) in a file, so they
// outlive a restart.
type MemStore struct {
	mu     sync.RWMutex
	byID   map[string]Key
	byHash map[[sha256.Size]byte]string
	path   string // "": memory only
}

// OpenFileStore returns a store kept in the JSON file path (mode 0600,
// written whole and atomically on every change), loading it when it
// exists.
func OpenFileStore(path string) (*MemStore, error) {
	s := NewMemStore()
	s.path = path
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("auth: keys file: %w", err)
	}
	var keys []Key
	if err := json.Unmarshal(b, &keys); err != nil {
		return nil, fmt.Errorf("auth: keys file %s: %w", path, err)
	}
	for _, k := range keys {
		s.byID[k.ID] = k
		s.byHash[k.Hash] = k.ID
	}
	return s, nil
}

// save writes the keys to the file; s.mu is held.
func (s *MemStore) save() error {
	if s.path == "" {
		return nil
	}
	keys := make([]Key, 0, len(s.byID))
	for _, k := range s.byID {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].ID < keys[j].ID })
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return fmt.Errorf("auth: keys file: %w", err)
	}
	err := atomicfile.WriteMode(s.path, 0o600, func(w io.Writer) error { return json.NewEncoder(w).Encode(keys) })
	if err != nil {
		return fmt.Errorf("auth: keys file: %w", err)
	}
	return nil
}

// NewMemStore returns an empty in-memory store.
func NewMemStore() *MemStore {
	return &MemStore{byID: map[string]Key{}, byHash: map[[sha256.Size]byte]string{}}
}

// Lookup implements Store.
func (s *MemStore) Lookup(hash [sha256.Size]byte) (Key, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	id, ok := s.byHash[hash]
	if !ok {
		return Key{}, false
	}
	return s.byID[id], true
}

// List implements Store.
func (s *MemStore) List() []Key {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Key, 0, len(s.byID))
	for _, k := range s.byID {
		if k.Revoked.IsZero() {
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Put implements Store.
func (s *MemStore) Put(_ context.Context, k Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byID[k.ID]; ok {
		return errors.New("auth: key id exists")
	}
	s.byID[k.ID] = k
	s.byHash[k.Hash] = k.ID
	if err := s.save(); err != nil {
		delete(s.byID, k.ID)
		delete(s.byHash, k.Hash)
		return err
	}
	return nil
}

// Revoke implements Store.
func (s *MemStore) Revoke(_ context.Context, id string, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.byID[id]
	if !ok || !k.Revoked.IsZero() {
		return ErrNotFound
	}
	old := k
	k.Revoked = now
	s.byID[id] = k
	if err := s.save(); err != nil {
		s.byID[id] = old
		return err
	}
	return nil
}
