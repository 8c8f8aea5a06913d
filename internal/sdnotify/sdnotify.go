// Package sdnotify speaks systemd's service notification protocol: a
// datagram per state change ("READY=1", "STOPPING=1", "WATCHDOG=1",
// "STATUS=…") to the socket systemd names in NOTIFY_SOCKET, and the
// watchdog interval it asks for in WATCHDOG_USEC. Outside systemd (no
// NOTIFY_SOCKET) every call does nothing, so the server calls it
// unconditionally.
package sdnotify

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"
)

// Notifier sends states to one socket. The zero value and a nil pointer
// are disabled notifiers.
type Notifier struct {
	addr     *net.UnixAddr
	watchdog time.Duration
}

// FromEnv reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID through
// getenv (os.Getenv in the server). pid is this process's: a watchdog
// meant for another process (WATCHDOG_PID set and different) is ignored.
func FromEnv(getenv func(string) string, pid int) (*Notifier, error) {
	sock := getenv("NOTIFY_SOCKET")
	if sock == "" {
		return &Notifier{}, nil
	}
	if sock[0] != '/' && sock[0] != '@' {
		return nil, fmt.Errorf("sdnotify: NOTIFY_SOCKET %q is neither a path nor an abstract socket", sock)
	}
	n := &Notifier{addr: &net.UnixAddr{Name: sock, Net: "unixgram"}}
	if sock[0] == '@' {
		n.addr.Name = "\x00" + sock[1:]
	}
	if us := getenv("WATCHDOG_USEC"); us != "" {
		if p := getenv("WATCHDOG_PID"); p != "" && p != strconv.Itoa(pid) {
			return n, nil
		}
		v, err := strconv.ParseInt(us, 10, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("sdnotify: WATCHDOG_USEC %q is not a positive number", us)
		}
		n.watchdog = time.Duration(v) * time.Microsecond
	}
	return n, nil
}

// Enabled says whether a service manager listens.
func (n *Notifier) Enabled() bool { return n != nil && n.addr != nil }

// Watchdog is the interval systemd expects a WATCHDOG=1 within (0: none).
func (n *Notifier) Watchdog() time.Duration {
	if n == nil {
		return 0
	}
	return n.watchdog
}

// Notify sends one state message ("READY=1\nSTATUS=serving").
func (n *Notifier) Notify(state string) error {
	if !n.Enabled() {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	return nil
}

// RunWatchdog sends WATCHDOG=1 every half interval while healthy answers
// nil, until ctx is done; a failing health check is not answered, so
// systemd restarts a node that stopped serving. It returns at once
// without a watchdog.
func (n *Notifier) RunWatchdog(ctx context.Context, healthy func(context.Context) error, onErr func(error)) {
	if !n.Enabled() || n.watchdog == 0 {
		return
	}
	t := time.NewTicker(n.watchdog / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		hctx, cancel := context.WithTimeout(ctx, n.watchdog/4)
		err := healthy(hctx)
		cancel()
		if err == nil {
			err = n.Notify("WATCHDOG=1")
		}
		if err != nil && ctx.Err() == nil && onErr != nil {
			onErr(err)
		}
	}
}
