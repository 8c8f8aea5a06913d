package netsim

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrUnavailable is returned (wrapped, with the reason) where network
// namespaces cannot be made: not Linux, not root, or no `ip`.
var ErrUnavailable = errors.New("netsim: network namespaces unavailable")

// Link is the shape of every hop of a Chain.
type Link struct {
	Delay   time.Duration // one way, added in each direction (0: none)
	RateBit int64         // bandwidth in bits per second, each direction (0: unlimited)
}

// String names the link as the benchmark's profiles do: "1ms+10gbit",
// "loopback" for the zero Link.
func (l Link) String() string {
	var parts []string
	if l.Delay > 0 {
		parts = append(parts, l.Delay.String())
	}
	if l.RateBit > 0 {
		parts = append(parts, rateString(l.RateBit))
	}
	if len(parts) == 0 {
		return "loopback"
	}
	return strings.Join(parts, "+")
}

// rateString is a rate in tc's units ("10gbit", "1gbit", "100mbit",
// "1500bit").
func rateString(bits int64) string {
	for _, u := range []struct {
		n    int64
		name string
	}{{1e9, "gbit"}, {1e6, "mbit"}, {1e3, "kbit"}} {
		if bits >= u.n && bits%u.n == 0 {
			return fmt.Sprintf("%d%s", bits/u.n, u.name)
		}
	}
	return fmt.Sprintf("%dbit", bits)
}

// ParseLink reads a profile name: "loopback", or a delay and/or a rate
// joined by "+" ("1ms+10gbit", "10ms", "1gbit").
func ParseLink(s string) (Link, error) {
	var l Link
	if s == "loopback" {
		return l, nil
	}
	for p := range strings.SplitSeq(s, "+") {
		if d, err := time.ParseDuration(p); err == nil && d > 0 {
			l.Delay = d
			continue
		}
		r, err := parseRate(p)
		if err != nil {
			return Link{}, fmt.Errorf("netsim: link %q: %q is neither a delay (1ms) nor a rate (10gbit)", s, p)
		}
		l.RateBit = r
	}
	return l, nil
}

func parseRate(s string) (int64, error) {
	for _, u := range []struct {
		suffix string
		n      int64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}} {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			var v int64
			if _, err := fmt.Sscanf(num, "%d", &v); err != nil || v <= 0 || fmt.Sprint(v) != num {
				return 0, fmt.Errorf("bad rate %q", s)
			}
			return v * u.n, nil
		}
	}
	return 0, fmt.Errorf("bad rate %q", s)
}
