package hub

import (
	"net/http"
	"net/url"
	"testing"
)

// TestSameOrigin: the token goes only to the endpoint's scheme, host and
// port; Go's redirect rule would also send it to a sub-domain of the
// endpoint (hf.co → cas-bridge.xethub.hf.co) or to another port.
func TestSameOrigin(t *testing.T) {
	for _, tc := range []struct {
		endpoint, target string
		want             bool
	}{
		{"https://huggingface.co", "https://huggingface.co/org/m/resolve/main/x", true},
		{"https://huggingface.co", "https://HuggingFace.co:443/api/models", true},
		{"https://hf.co", "https://cas-bridge.xethub.hf.co/xet-bridge-us/abc?X-Amz-Signature=s", false},
		{"https://huggingface.co", "https://cdn-lfs.huggingface.co/repos/x", false},
		{"https://huggingface.co", "http://huggingface.co/x", false},
		{"http://127.0.0.1:8080", "http://127.0.0.1:9090/x", false},
		{"http://127.0.0.1:80", "http://127.0.0.1/x", true},
		{"http://mirror.example/", "http://mirror.example/org/m/resolve/main/x", true},
	} {
		c := New(Options{Endpoint: tc.endpoint})
		u, err := url.Parse(tc.target)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.sameOrigin(u); got != tc.want {
			t.Errorf("endpoint %s, %s: same origin %v, want %v", tc.endpoint, tc.target, got, tc.want)
		}
	}
}

// TestCheckRedirect: a followed redirect off the endpoint's origin loses
// Authorization and cookies; one on it keeps them.
func TestCheckRedirect(t *testing.T) {
	c := New(Options{Endpoint: "https://hf.co", Token: "tok"})
	for target, keep := range map[string]bool{"https://hf.co/api/models/o/r": true, "https://cas-bridge.xethub.hf.co/x": false} {
		req, err := http.NewRequest(http.MethodGet, target, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer tok")
		req.Header.Set("Cookie", "m_session_id=tok")
		if err := c.checkRedirect(req, nil); err != nil {
			t.Fatal(err)
		}
		if got := req.Header.Get("Authorization") != "" && req.Header.Get("Cookie") != ""; got != keep {
			t.Errorf("%s: credentials kept %v, want %v", target, got, keep)
		}
	}
}
