package openclaw_test

import (
	"testing"
	"time"

	"fusion/router/openclaw"
	"fusion/router/openclaw/storetest"
)

func TestMemStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, ttl time.Duration, capacity int) openclaw.SessionStore {
		m := openclaw.NewMemStore(openclaw.MemStoreOptions{TTL: ttl, Cap: capacity})
		t.Cleanup(m.Close)
		return m
	})
}
