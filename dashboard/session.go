package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"sync"
	"time"
)

// SessionStore keeps the panel's sessions, each known by the SHA-256 of
// its cookie's secret (the secret itself is kept nowhere). In a cluster
// it is the replicated state (cluster.PanelSessions), so a session is
// good on every node; alone, an in-memory map (NewMemSessions).
type SessionStore interface {
	// Create stores a session until expires; past max live sessions
	// (0: no cap) it ends those that expire first.
	Create(ctx context.Context, hash [sha256.Size]byte, now, expires time.Time, max int) error
	// Lookup returns the expiry of the session of hash if it is live at
	// now.
	Lookup(ctx context.Context, hash [sha256.Size]byte, now time.Time) (expires time.Time, ok bool)
	// End ends the session of hash (unknown: no error).
	End(ctx context.Context, hash [sha256.Size]byte) error
}

// session is one signed-in browser, as a request sees it.
type session struct {
	csrf    string
	expires time.Time
}

// token is 32 random bytes, base64url.
func token() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("dashboard: crypto/rand: " + err.Error()) // never happens on a supported OS
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// cookieHash is what the store knows a session by.
func cookieHash(secret string) [sha256.Size]byte { return sha256.Sum256([]byte(secret)) }

// csrfOf is a session's CSRF token, derived from its cookie's secret so
// that every node can check it without storing it: the page reads it
// from /admin/session (the cookie itself is HttpOnly), a page of another
// site can read neither, and the store's hash does not give it.
func csrfOf(secret string) string {
	h := sha256.Sum256([]byte("fusion panel csrf\x00" + secret))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

// MemSessions is the SessionStore of a node alone: a map in memory, lost
// on restart.
type MemSessions struct {
	mu  sync.Mutex
	byH map[[sha256.Size]byte]time.Time // expiry by hash
}

// NewMemSessions returns an empty in-memory store.
func NewMemSessions() *MemSessions { return &MemSessions{byH: map[[sha256.Size]byte]time.Time{}} }

// Create implements SessionStore.
func (s *MemSessions) Create(_ context.Context, hash [sha256.Size]byte, now, expires time.Time, max int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for h, exp := range s.byH {
		if !now.Before(exp) {
			delete(s.byH, h)
		}
	}
	delete(s.byH, hash)
	for max > 0 && len(s.byH) >= max {
		var first [sha256.Size]byte
		var at time.Time
		for h, exp := range s.byH {
			if at.IsZero() || exp.Before(at) {
				first, at = h, exp
			}
		}
		delete(s.byH, first)
	}
	s.byH[hash] = expires
	return nil
}

// Lookup implements SessionStore.
func (s *MemSessions) Lookup(_ context.Context, hash [sha256.Size]byte, now time.Time) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.byH[hash]
	if !ok {
		return time.Time{}, false
	}
	if !now.Before(exp) {
		delete(s.byH, hash)
		return time.Time{}, false
	}
	return exp, true
}

// End implements SessionStore.
func (s *MemSessions) End(_ context.Context, hash [sha256.Size]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byH, hash)
	return nil
}

// Len is the number of sessions held (expired ones included until
// pruned).
func (s *MemSessions) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byH)
}

// sameToken compares two tokens in constant time.
func sameToken(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
