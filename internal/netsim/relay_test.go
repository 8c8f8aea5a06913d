package netsim

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"testing"
	"time"
)

// echo serves an echo on loopback until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, lis)
	return lis.Addr().String()
}

// serveEcho echoes every connection to lis until the test ends.
func serveEcho(t *testing.T, lis net.Listener) {
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
}

// rtt is the round trip of one byte over c.
func rtt(t *testing.T, c net.Conn) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := c.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// TestRelay: every round trip through a relay of delay d takes at least
// 2d, and 4 MiB written at once come back whole and in order; a half-
// closed stream ends the other way once its data is through; Close ends
// the connections in flight.
func TestRelay(t *testing.T) {
	const d = 15 * time.Millisecond
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := NewRelay(lis, echo(t), nil, d)
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 3 {
		if got := rtt(t, c); got < 2*d {
			t.Fatalf("a round trip through the relay took %v, want ≥ %v", got, 2*d)
		}
	}
	data := make([]byte, 4<<20)
	rand.Read(data)
	go func() {
		_, _ = c.Write(data)
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	back, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, data) {
		t.Fatalf("%d bytes came back, not the %d sent in order", len(back), len(data))
	}

	c2, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	rtt(t, c2)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c2.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := c2.Read(make([]byte, 1)); err == nil {
		t.Fatal("a relayed connection outlived the relay's Close")
	}
}

// TestRelayUnreachable: a target that refuses closes the accepted
// connection.
func TestRelayUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	target := dead.Addr().String()
	dead.Close()
	r := NewRelay(lis, target, (&net.Dialer{}).DialContext, time.Millisecond)
	defer r.Close()
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read through a relay to nothing succeeded")
	}
}

// TestParseLink: profile names read back as they print.
func TestParseLink(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Link
		bad  bool
	}{
		{"loopback", Link{}, false},
		{"1ms+10gbit", Link{Delay: time.Millisecond, RateBit: 10e9}, false},
		{"10ms+1gbit", Link{Delay: 10 * time.Millisecond, RateBit: 1e9}, false},
		{"10ms", Link{Delay: 10 * time.Millisecond}, false},
		{"100mbit", Link{RateBit: 100e6}, false},
		{"1ms+fast", Link{}, true},
		{"-1gbit", Link{}, true},
		{"", Link{}, true},
	} {
		got, err := ParseLink(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("ParseLink(%q) = %+v, %v; want %+v (error: %v)", tc.in, got, err, tc.want, tc.bad)
		}
		if err == nil && got.String() != tc.in {
			t.Errorf("%+v prints %q, want %q", got, got.String(), tc.in)
		}
	}
}
