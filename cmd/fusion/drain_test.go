package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"fusion/cluster"
)

// TestDrainRetriesWithoutLeader: a drain or undrain the cluster cannot
// record for a moment (503 with Retry-After, as during an election, or
// 429 with Retry-After, the key's rate limit) is posted again until it
// is; any other refusal is final.
func TestDrainRetriesWithoutLeader(t *testing.T) {
	cases := []struct {
		name     string
		action   string
		answers  []int // status of each POST, in turn; the last repeats
		retry    string
		timeout  string
		wantCode int
		posts    int32
		wantOut  string
		wantErr  string
	}{
		{"drain after two 503s", "drain", []int{503, 503, 202}, "0", "30s", 0, 3, "p2 drained: safe to stop", "retrying"},
		{"undrain after one 503", "undrain", []int{503, 202}, "0", "30s", 0, 2, "p2 undrained", "retrying"},
		{"drain after a 429", "drain", []int{429, 202}, "0", "30s", 0, 2, "p2 drained: safe to stop", "retrying"},
		{"429 without Retry-After is final", "drain", []int{429}, "", "30s", 1, 1, "", "429 Too Many Requests"},
		{"404 is final", "drain", []int{404}, "0", "30s", 1, 1, "", "404 Not Found"},
		{"503 without Retry-After is final", "drain", []int{503}, "", "30s", 1, 1, "", "503 Service Unavailable"},
		{"no leader until the timeout", "drain", []int{503}, "1", "1500ms", 1, 2, "", "not recorded within --timeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var posts atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				want := cluster.AdminPath + "/nodes/p2/"
				switch {
				case r.Method == http.MethodPost && r.URL.Path == want+tc.action:
					n := int(posts.Add(1))
					code := tc.answers[min(n, len(tc.answers))-1]
					if (code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests) && tc.retry != "" {
						w.Header().Set("Retry-After", tc.retry)
					}
					w.WriteHeader(code)
					w.Write([]byte(`{"node":"p2"}`))
				case r.Method == http.MethodGet && r.URL.Path == want+"drain":
					w.Write([]byte(`{"node":"p2","drain":true,"state":"` + cluster.DrainStateDrained + `"}`))
				default:
					t.Errorf("unexpected %s %s", r.Method, r.URL)
					w.WriteHeader(http.StatusTeapot)
				}
			}))
			defer srv.Close()
			var out, errb bytes.Buffer
			code := run(context.Background(), []string{"cluster", tc.action, "--addr", srv.URL, "--timeout", tc.timeout, "p2"}, &out, &errb)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, tc.wantCode, out.String(), errb.String())
			}
			if got := posts.Load(); got != tc.posts {
				t.Errorf("%d POSTs, want %d", got, tc.posts)
			}
			if !strings.Contains(out.String(), tc.wantOut) {
				t.Errorf("stdout %q lacks %q", out.String(), tc.wantOut)
			}
			if !strings.Contains(errb.String(), tc.wantErr) {
				t.Errorf("stderr %q lacks %q", errb.String(), tc.wantErr)
			}
		})
	}
}
