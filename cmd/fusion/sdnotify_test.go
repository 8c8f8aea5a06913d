package main

import (
	"context"
	"fusion/internal/testenv"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeSystemdNotify: under systemd's notify protocol (a real unixgram
// socket in NOTIFY_SOCKET, a 400 ms WATCHDOG_USEC) `fusion serve` says
// READY=1 once it serves, answers the watchdog at least every half
// interval while its /health answers, and says STOPPING=1 on SIGTERM.
func TestServeSystemdNotify(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "400000")
	t.Setenv("WATCHDOG_PID", "")

	type msg struct {
		at   time.Time
		text string
	}
	msgs := make(chan msg, 100)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- msg{time.Now(), string(buf[:n])}
		}
	}()
	next := func(what string) msg {
		t.Helper()
		select {
		case m := <-msgs:
			return m
		case <-time.After(20 * time.Second):
			t.Fatalf("no %s", what)
		}
		return msg{}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr testenv.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--threads", "1"}, io.Discard, &stderr)
	}()
	ready := next("READY=1")
	if !strings.HasPrefix(ready.text, "READY=1\nSTATUS=serving on http://127.0.0.1:") {
		t.Fatalf("first message %q", ready.text)
	}
	last := ready.at
	for i := range 3 {
		m := next("WATCHDOG=1")
		if m.text != "WATCHDOG=1" {
			t.Fatalf("message %d: %q", i, m.text)
		}
		// Every half interval (200 ms), with slack for a loaded machine:
		// never past the 400 ms systemd would act on, but scheduling on a
		// busy 2-core box can delay a tick; a gap past 2 s is a bug.
		if gap := m.at.Sub(last); gap > 2*time.Second {
			t.Errorf("watchdog gap %v", gap)
		}
		last = m.at
	}
	cancel()
	for {
		m := next("STOPPING=1")
		if m.text == "WATCHDOG=1" {
			continue
		}
		if m.text != "STOPPING=1\nSTATUS=draining" {
			t.Fatalf("message on stop: %q", m.text)
		}
		break
	}
	if code := <-done; code != 0 {
		t.Errorf("exit status %d: %s", code, stderr.String())
	}
}
