package dashboard

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"sync"
	"time"
)

// session is one signed-in browser.
type session struct {
	csrf    string
	expires time.Time
}

// sessions holds the signed-in browsers of this node, in memory, keyed by
// the SHA-256 of the cookie's secret (the secret itself is kept nowhere).
// At most max live sessions: signing in past the cap ends the session
// that expires first.
type sessions struct {
	mu  sync.Mutex
	byH map[[sha256.Size]byte]session
	max int
	ttl time.Duration
	now func() time.Time
}

func newSessions(max int, ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{byH: map[[sha256.Size]byte]session{}, max: max, ttl: ttl, now: now}
}

// token is 32 random bytes, base64url.
func token() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("dashboard: crypto/rand: " + err.Error()) // never happens on a supported OS
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// create starts a session and returns its cookie secret.
func (s *sessions) create() (secret string, ss session) {
	secret = token()
	now := s.now()
	ss = session{csrf: token(), expires: now.Add(s.ttl)}
	s.mu.Lock()
	defer s.mu.Unlock()
	for h, o := range s.byH {
		if !now.Before(o.expires) {
			delete(s.byH, h)
		}
	}
	for len(s.byH) >= s.max {
		var first [sha256.Size]byte
		var at time.Time
		for h, o := range s.byH {
			if at.IsZero() || o.expires.Before(at) {
				first, at = h, o.expires
			}
		}
		delete(s.byH, first)
	}
	s.byH[sha256.Sum256([]byte(secret))] = ss
	return secret, ss
}

// get returns the live session of a cookie secret.
func (s *sessions) get(secret string) (session, bool) {
	h := sha256.Sum256([]byte(secret))
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.byH[h]
	if !ok {
		return session{}, false
	}
	if !s.now().Before(ss.expires) {
		delete(s.byH, h)
		return session{}, false
	}
	return ss, true
}

// end forgets a session.
func (s *sessions) end(secret string) {
	h := sha256.Sum256([]byte(secret))
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byH, h)
}

// len is the number of sessions held (expired ones included until pruned).
func (s *sessions) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byH)
}

// sameToken compares two tokens in constant time.
func sameToken(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
