package faultserve

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

// TestFaults: both body paths count what they send, corrupt one answer
// once, and the throttle splits a paced body into chunks.
func TestFaults(t *testing.T) {
	body := bytes.Repeat([]byte{7}, 3*chunk+5)
	tests := []struct {
		name string
		send func(f *Faults, key string) []byte
	}{
		{"reader", func(f *Faults, key string) []byte {
			b, err := io.ReadAll(f.Reader(key, io.NopCloser(bytes.NewReader(body))))
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
		{"writer", func(f *Faults, key string) []byte {
			rec := httptest.NewRecorder()
			w := f.Writer(key, rec)
			if f.TakeCorrupt(key) {
				b := slices.Clone(body)
				b[0] ^= 0xff
				_, _ = w.Write(b)
			} else {
				_, _ = w.Write(body)
			}
			return rec.Body.Bytes()
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f Faults
			f.Record("GET /a")
			f.CorruptNext("o/m/a")
			if got := tc.send(&f, "o/m/a"); bytes.Equal(got, body) || got[0] != body[0]^0xff || !bytes.Equal(got[1:], body[1:]) {
				t.Error("first answer not corrupted in exactly its first byte")
			}
			if got := tc.send(&f, "o/m/a"); !bytes.Equal(got, body) {
				t.Error("second answer corrupted: a corruption applies once")
			}
			if got, want := f.Fetched("o/m/a"), int64(2*len(body)); got != want {
				t.Errorf("fetched %d, want %d", got, want)
			}
			if f.Fetched("o/m/b") != 0 {
				t.Error("an unasked file counted")
			}
			if got := f.Requests(); !slices.Equal(got, []string{"GET /a"}) {
				t.Errorf("requests %v", got)
			}
		})
	}
}

// TestThrottleChunks: under a throttle no read or write passes more than
// one chunk (the rate high enough that no wait is long).
func TestThrottleChunks(t *testing.T) {
	var f Faults
	f.Throttle(1 << 40)
	r := f.Reader("k", io.NopCloser(bytes.NewReader(make([]byte, 3*chunk))))
	buf := make([]byte, 3*chunk)
	if n, _ := r.Read(buf); n != chunk {
		t.Errorf("paced read of %d bytes, want %d", n, chunk)
	}
	var sizes []int
	w := f.Writer("k", sizeRecorder{httptest.NewRecorder(), &sizes})
	if n, err := w.Write(buf); n != len(buf) || err != nil {
		t.Fatalf("wrote %d, %v", n, err)
	}
	if !slices.Equal(sizes, []int{chunk, chunk, chunk}) {
		t.Errorf("paced writes %v, want three chunks", sizes)
	}
	f.Throttle(0)
	sizes = nil
	_, _ = f.Writer("k", sizeRecorder{httptest.NewRecorder(), &sizes}).Write(buf)
	if len(sizes) != 1 {
		t.Errorf("unpaced writes %v, want one", sizes)
	}
}

type sizeRecorder struct {
	*httptest.ResponseRecorder
	sizes *[]int
}

func (s sizeRecorder) Write(b []byte) (int, error) {
	*s.sizes = append(*s.sizes, len(b))
	return s.ResponseRecorder.Write(b)
}

var _ http.ResponseWriter = sizeRecorder{}
