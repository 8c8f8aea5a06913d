package sdnotify

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      map[string]string
		enabled  bool
		watchdog time.Duration
		err      string
	}{
		{"outside systemd", nil, false, 0, ""},
		{"socket only", map[string]string{"NOTIFY_SOCKET": "/run/x"}, true, 0, ""},
		{"abstract socket", map[string]string{"NOTIFY_SOCKET": "@x"}, true, 0, ""},
		{"watchdog", map[string]string{"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "30000000"}, true, 30 * time.Second, ""},
		{"watchdog of this pid", map[string]string{"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "1000", "WATCHDOG_PID": "42"}, true, time.Millisecond, ""},
		{"watchdog of another pid", map[string]string{"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "1000", "WATCHDOG_PID": "7"}, true, 0, ""},
		{"relative socket", map[string]string{"NOTIFY_SOCKET": "run/x"}, false, 0, "neither a path"},
		{"bad watchdog", map[string]string{"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "soon"}, false, 0, "WATCHDOG_USEC"},
		{"zero watchdog", map[string]string{"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "0"}, false, 0, "WATCHDOG_USEC"},
	} {
		n, err := FromEnv(env(tc.env), 42)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || n.Enabled() != tc.enabled || n.Watchdog() != tc.watchdog {
			t.Errorf("%s: enabled %v watchdog %v err %v", tc.name, n.Enabled(), n.Watchdog(), err)
		}
	}
	var none *Notifier
	if none.Enabled() || none.Notify("READY=1") != nil || none.Watchdog() != 0 {
		t.Error("a nil notifier is not a disabled one")
	}
}

// TestWatchdogFollowsHealth: WATCHDOG=1 is sent while the health check
// passes and not while it fails.
func TestWatchdogFollowsHealth(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "n")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	n, err := FromEnv(env(map[string]string{"NOTIFY_SOCKET": sock, "WATCHDOG_USEC": "40000"}), 1)
	if err != nil {
		t.Fatal(err)
	}
	healthy := make(chan bool, 1)
	healthy <- true
	state := true
	check := func(context.Context) error {
		select {
		case state = <-healthy:
		default:
		}
		if !state {
			return errors.New("down")
		}
		return nil
	}
	var fails int
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.RunWatchdog(ctx, check, func(error) { fails++ }) }()

	buf := make([]byte, 64)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	k, err := conn.Read(buf)
	if err != nil || string(buf[:k]) != "WATCHDOG=1" {
		t.Fatalf("healthy: %q %v", buf[:k], err)
	}
	healthy <- false
	// Drain what was sent before the switch, then expect silence.
	time.Sleep(100 * time.Millisecond)
	for {
		conn.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := conn.Read(buf); err != nil {
			break
		}
	}
	conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if k, err := conn.Read(buf); err == nil {
		t.Errorf("a failing node answered the watchdog: %q", buf[:k])
	}
	cancel()
	<-done
	if fails == 0 {
		t.Error("the failing health check was not reported")
	}
}
