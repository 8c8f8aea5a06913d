package netsim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Chain is n network namespaces in a line, node i joined to node i+1 by
// a veth pair (hop i) shaped as its Link in both directions: the stages
// of a pipeline, each talking only to the next.
type Chain struct {
	link Link
	id   string
	ns   []string
	// DelayMethod is how the hops' delay is made: "netem" (a netem qdisc
	// under the tbf of each veth end), "relay" (the kernel has no netem:
	// Via puts a delaying Relay on the dialling side), "" (no delay).
	DelayMethod string
	// BandwidthMethod is "tbf" when the hops' rate is limited, else "".
	BandwidthMethod string

	mu     sync.Mutex
	relays []*Relay
	closed bool
}

// Available says why network namespaces cannot be made here (an error
// wrapping ErrUnavailable), or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: not root", ErrUnavailable)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("%w: no ip command: %v", ErrUnavailable, err)
	}
	if _, err := exec.LookPath("tc"); err != nil {
		return fmt.Errorf("%w: no tc command: %v", ErrUnavailable, err)
	}
	return nil
}

// NewChain makes n ≥ 2 namespaces with names unique to this call, joined
// by shaped veth pairs; Close removes them (and with them the veths).
func NewChain(ctx context.Context, n int, link Link) (*Chain, error) {
	if n < 2 {
		return nil, fmt.Errorf("netsim: a chain needs 2 nodes or more, not %d", n)
	}
	if err := Available(); err != nil {
		return nil, err
	}
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	c := &Chain{link: link, id: hex.EncodeToString(b)}
	if link.RateBit > 0 {
		c.BandwidthMethod = "tbf"
	}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	for i := range n {
		name := fmt.Sprintf("fusion-%s-%d", c.id, i)
		if err := run(ctx, "ip", "netns", "add", name); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		c.ns = append(c.ns, name)
		if err := run(ctx, "ip", "-n", name, "link", "set", "lo", "up"); err != nil {
			return nil, err
		}
	}
	for h := range n - 1 {
		a, b := c.veth(h, 'a'), c.veth(h, 'b')
		if err := run(ctx, "ip", "link", "add", a, "netns", c.ns[h], "type", "veth", "peer", "name", b, "netns", c.ns[h+1]); err != nil {
			return nil, err
		}
		for _, end := range []struct{ ns, dev, ip string }{{c.ns[h], a, c.hopIP(h, 1)}, {c.ns[h+1], b, c.hopIP(h, 2)}} {
			if err := run(ctx, "ip", "-n", end.ns, "addr", "add", end.ip+"/24", "dev", end.dev); err != nil {
				return nil, err
			}
			if err := run(ctx, "ip", "-n", end.ns, "link", "set", end.dev, "up"); err != nil {
				return nil, err
			}
			if err := c.shape(ctx, end.ns, end.dev); err != nil {
				return nil, err
			}
		}
	}
	if link.Delay > 0 && c.DelayMethod == "" {
		c.DelayMethod = "relay"
	}
	ok = true
	return c, nil
}

// shape puts the link's qdiscs on one veth end: tbf at the root for the
// rate, and netem (under the tbf, or at the root without a rate) for the
// delay when the kernel has netem (the first end tried decides for the
// chain).
func (c *Chain) shape(ctx context.Context, ns, dev string) error {
	tc := []string{"netns", "exec", ns, "tc", "qdisc", "add", "dev", dev}
	netemAt := []string{"root"}
	if rate := c.link.RateBit; rate > 0 {
		// The bucket holds 10 ms at the rate, at least 256 KiB (more
		// than a GSO segment of 64 KiB), at most 64 MiB.
		burst := min(max(rate/8/100, 256<<10), 64<<20)
		if err := run(ctx, "ip", append(tc, "root", "handle", "1:", "tbf", "rate", strconv.FormatInt(rate, 10)+"bit",
			"burst", strconv.FormatInt(burst, 10), "latency", "200ms")...); err != nil {
			return err
		}
		netemAt = []string{"parent", "1:1"}
	}
	if c.link.Delay <= 0 || c.DelayMethod == "relay" {
		return nil
	}
	us := strconv.FormatInt(c.link.Delay.Microseconds(), 10) + "us"
	err := run(ctx, "ip", append(append(tc, netemAt...), "handle", "10:", "netem", "delay", us, "limit", "100000")...)
	switch {
	case err == nil:
		c.DelayMethod = "netem"
	case c.DelayMethod == "":
		c.DelayMethod = "relay" // no netem in this kernel: Via relays
	default:
		return err
	}
	return nil
}

// veth is hop h's device on side 'a' (node h) or 'b' (node h+1).
func (c *Chain) veth(h int, side byte) string { return fmt.Sprintf("fs%s%d%c", c.id, h, side) }

// hopIP is node h's (host 1) or node h+1's (host 2) address on hop h.
func (c *Chain) hopIP(h, host int) string { return fmt.Sprintf("10.213.%d.%d", h, host) }

// Nodes is the chain's length.
func (c *Chain) Nodes() int { return len(c.ns) }

// Namespace is node i's network namespace (for `ip netns exec`).
func (c *Chain) Namespace(i int) string { return c.ns[i] }

// Addr is node i's address (i ≥ 1) on the hop from node i−1: where it
// listens for the stage before it.
func (c *Chain) Addr(i int) string { return c.hopIP(i-1, 2) }

// Do runs f on an OS thread in node i's namespace: sockets f opens stay
// in it. f must not rely on goroutines it starts being there.
func (c *Chain) Do(i int, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // left locked (the thread dies) if it cannot go back
		self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			errc <- err
			return
		}
		defer self.Close()
		target, err := os.Open("/var/run/netns/" + c.ns[i])
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netsim: entering %s: %w", c.ns[i], err)
			return
		}
		ferr := f()
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}

// Listen listens on addr ("host:port") in node i's namespace.
func (c *Chain) Listen(i int, addr string) (net.Listener, error) {
	var lis net.Listener
	err := c.Do(i, func() (err error) {
		lis, err = net.Listen("tcp", addr)
		return err
	})
	return lis, err
}

// Dialer dials from node i's namespace.
func (c *Chain) Dialer(i int) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		err := c.Do(i, func() (err error) {
			conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}
}

// Via is the address node i dials (with Dialer(i)) to reach target on
// node i+1 over hop i with the link's delay: target itself when the
// kernel delays (netem) or there is no delay, else the address of a
// Relay in node i's namespace (closed with the chain).
func (c *Chain) Via(i int, target string) (string, error) {
	if c.DelayMethod != "relay" {
		return target, nil
	}
	lis, err := c.Listen(i, "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	r := NewRelay(lis, target, c.Dialer(i), c.link.Delay)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		r.Close()
		return "", errors.New("netsim: the chain is closed")
	}
	c.relays = append(c.relays, r)
	return r.Addr(), nil
}

var sentRE = regexp.MustCompile(`qdisc tbf [^\n]*\n\s*Sent (\d+) bytes`)

// SentBytes is what hop h's tbf qdiscs sent, both directions together:
// proof that traffic crossed the shaped link (an error without a rate:
// no tbf).
func (c *Chain) SentBytes(ctx context.Context, h int) (int64, error) {
	var total int64
	for _, end := range []struct{ ns, dev string }{{c.ns[h], c.veth(h, 'a')}, {c.ns[h+1], c.veth(h, 'b')}} {
		out, err := exec.CommandContext(ctx, "ip", "netns", "exec", end.ns, "tc", "-s", "qdisc", "show", "dev", end.dev).CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("netsim: tc -s qdisc show dev %s: %w: %s", end.dev, err, out)
		}
		m := sentRE.FindSubmatch(out)
		if m == nil {
			return 0, fmt.Errorf("netsim: no tbf on %s: %s", end.dev, out)
		}
		n, _ := strconv.ParseInt(string(m[1]), 10, 64)
		total += n
	}
	return total, nil
}

// Close stops the relays and deletes the namespaces (their veths go
// with them).
func (c *Chain) Close() error {
	c.mu.Lock()
	relays, closed := c.relays, c.closed
	c.relays, c.closed = nil, true
	c.mu.Unlock()
	if closed {
		return nil
	}
	var errs []error
	for _, r := range relays {
		r.Close()
	}
	// The names stay: a dialer still in use fails to enter a namespace
	// that is gone.
	for _, ns := range c.ns {
		if err := run(context.Background(), "ip", "netns", "delete", ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// run runs a command, its output in the error.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netsim: %s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
