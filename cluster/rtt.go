package cluster

import (
	"maps"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Round-trip times between members. memberlist probes one peer every
// ProbeInterval over UDP and reports each direct probe's round trip to a
// PingDelegate; the member keeps an exponentially weighted moving average
// per peer (rttTracker) and publishes a row of them — its RTT to each
// peer — in the inventory it records through the log (Inventory.RTTMicros).
// The row is republished only when a peer's RTT moved by more than both a
// relative and an absolute threshold (or a peer appeared or went), and at
// most once per interval, so jitter never turns into a stream of Raft
// writes. The leader's shard planner reads the rows (hopRTT).

// Defaults of RTTConfig.
const (
	DefaultRTTPublishInterval = 10 * time.Second
	DefaultRTTPublishChange   = 0.2
	DefaultRTTPublishMin      = 200 * time.Microsecond
	// DefaultUnknownRTT is the hop cost the planner counts between two
	// nodes neither of which has published an RTT to the other: a slow
	// LAN hop, so that measured links are preferred to unmeasured ones.
	DefaultUnknownRTT = 10 * time.Millisecond
)

// rttAlpha is the EWMA weight of a new sample (TCP's SRTT uses 1/8; the
// probes are rarer, so a sample weighs more).
const rttAlpha = 0.25

// RTTConfig sets how a member publishes its measured round-trip times and
// what the planner assumes for a hop nobody measured. Zero fields take
// the defaults above.
type RTTConfig struct {
	// PublishInterval is the least time between two publications of this
	// node's RTT row (the first one goes out at once).
	PublishInterval time.Duration
	// PublishChange (a fraction) and PublishMin: a peer's RTT must move by
	// more than both since the last publication to count as moved.
	PublishChange float64
	PublishMin    time.Duration
	// Unknown is the planner's cost of a hop with no RTT published either way.
	Unknown time.Duration
}

func (c *RTTConfig) defaults() {
	positive(&c.PublishInterval, DefaultRTTPublishInterval)
	positive(&c.PublishChange, DefaultRTTPublishChange)
	positive(&c.PublishMin, DefaultRTTPublishMin)
	positive(&c.Unknown, DefaultUnknownRTT)
}

// positive sets *v to def unless it is above zero.
func positive[T time.Duration | float64](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// rttTracker smooths the probes' round trips per peer and decides when
// the published row changes. It is safe for concurrent use.
type rttTracker struct {
	cfg RTTConfig

	mu      sync.Mutex
	cur     map[string]time.Duration // smoothed RTT per peer
	pub     map[string]time.Duration // the row last published
	pubAt   time.Time                // when pub was taken (zero: never)
	samples int                      // probes observed (for tests and status)
}

func newRTTTracker(cfg RTTConfig) *rttTracker {
	cfg.defaults()
	return &rttTracker{cfg: cfg, cur: map[string]time.Duration{}}
}

// observe folds one probe's round trip to peer into its average.
func (t *rttTracker) observe(peer string, rtt time.Duration) {
	if rtt <= 0 {
		rtt = time.Microsecond // a probe faster than the clock: count it as measured
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.samples++
	old, ok := t.cur[peer]
	if !ok {
		t.cur[peer] = rtt
		return
	}
	t.cur[peer] = old + time.Duration(rttAlpha*float64(rtt-old))
}

// forget drops a peer that failed or left: its RTT is measured afresh
// when it is back.
func (t *rttTracker) forget(peer string) {
	t.mu.Lock()
	delete(t.cur, peer)
	t.mu.Unlock()
}

// current is a copy of the smoothed RTTs.
func (t *rttTracker) current() map[string]time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.cur)
}

// row is the RTT row to publish at now, in microseconds (nil: none
// measured yet). It takes the current averages as the new row when they
// moved (moved) and the interval since the last publication has passed;
// otherwise it returns the last row unchanged.
func (t *rttTracker) row(now time.Time) map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.moved() && (t.pubAt.IsZero() || now.Sub(t.pubAt) >= t.cfg.PublishInterval) {
		t.pub = maps.Clone(t.cur)
		t.pubAt = now
	}
	if len(t.pub) == 0 {
		return nil
	}
	out := make(map[string]int64, len(t.pub))
	for id, d := range t.pub {
		out[id] = max(d.Microseconds(), 1)
	}
	return out
}

// moved says whether the averages differ from the published row enough to
// publish again: a peer added or gone, or one whose RTT moved by more than
// PublishChange of the published value and more than PublishMin.
func (t *rttTracker) moved() bool {
	if len(t.cur) != len(t.pub) {
		return true
	}
	for id, c := range t.cur {
		p, ok := t.pub[id]
		if !ok {
			return true
		}
		d := c - p
		if d < 0 {
			d = -d
		}
		if d > t.cfg.PublishMin && float64(d) > t.cfg.PublishChange*float64(p) {
			return true
		}
	}
	return false
}

// pingDelegate hands memberlist's direct probe round trips to the
// member's tracker (indirect and TCP fallback probes are not reported).
type pingDelegate struct{ t *rttTracker }

func (p pingDelegate) AckPayload() []byte { return nil }

func (p pingDelegate) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, _ []byte) {
	if other != nil {
		p.t.observe(other.Name, rtt)
	}
}

// RTTs are this node's smoothed round-trip times to its peers, measured
// by gossip probes (not necessarily published yet).
func (m *Member) RTTs() map[string]time.Duration { return m.rtt.current() }

// unknown is the hop cost for the planner (the default when unset).
func (c RTTConfig) unknown() time.Duration {
	positive(&c.Unknown, DefaultUnknownRTT)
	return c.Unknown
}
