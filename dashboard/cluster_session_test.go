package dashboard_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"fusion/cluster"
	"fusion/dashboard"
	"fusion/node"
	"fusion/node/nodetest"
)

// startMembers starts the members a (which bootstraps), b and c (which
// join it), each with the admin key and the options opts gives it, and
// waits until each knows a leader.
func startMembers(t *testing.T, opts func(id string) nodetest.Options) []*node.Node {
	t.Helper()
	var nodes []*node.Node
	for i, id := range []string{"a", "b", "c"} {
		o := opts(id)
		o.APIKey = key
		o.Cluster = node.ClusterConfig{NodeID: id, Listen: "127.0.0.1:0", RaftListen: "127.0.0.1:0", GRPCListen: "127.0.0.1:0",
			Secret: "s", Timing: cluster.TestTiming()}
		if i == 0 {
			o.Cluster.BootstrapExpect = 1
		} else {
			o.Cluster.Join = []string{nodes[0].Cluster().GossipAddr()}
		}
		nodes = append(nodes, nodetest.Start(t, o))
	}
	for _, n := range nodes {
		eventually(t, "a leader known to "+n.Cluster().ID(), func() string {
			if code, raw := call(t, "GET", n.URL()+"/admin/api/cluster", key, "", nil); code != 200 || !json200Leader(raw) {
				return fmt.Sprintf("%d %s", code, raw)
			}
			return ""
		})
	}
	return nodes
}

// json200Leader reports whether a cluster status names a leader.
func json200Leader(raw []byte) bool {
	var doc cluster.StatusDoc
	return json.Unmarshal(raw, &doc) == nil && doc.Leader != ""
}

// signedIn signs in on n and returns the session's cookie and CSRF token.
func signedIn(t *testing.T, n *node.Node) (*http.Cookie, string) {
	t.Helper()
	c := newClient(t, n.URL())
	code, _, doc := c.do("POST", "/admin/session", `{"key":"`+key+`"}`, nil)
	csrf, _ := doc["csrf_token"].(string)
	u, _ := url.Parse(n.URL())
	cookies := c.http.Jar.Cookies(u)
	if code != 200 || csrf == "" || len(cookies) != 1 || cookies[0].Name != n.Router().Panel().CookieName() {
		t.Fatalf("sign-in on %s: %d %v, cookies %v", n.Cluster().ID(), code, doc, cookies)
	}
	return cookies[0], csrf
}

// with is a client of n carrying a session cookie (a browser that
// followed a link from another node's panel).
func with(t *testing.T, n *node.Node, cookie *http.Cookie) *client {
	t.Helper()
	c := newClient(t, n.URL())
	u, _ := url.Parse(n.URL())
	c.http.Jar.SetCookies(u, []*http.Cookie{{Name: cookie.Name, Value: cookie.Value}})
	return c
}

// TestPanelSessionsCluster: a session signed in on one member's panel is
// good on the others (same cookie name, same CSRF token, writes
// included), a sign-out on any member ends it on all of them, and the
// session cap counts the whole cluster.
func TestPanelSessionsCluster(t *testing.T) {
	// The session cap: 2 in the whole cluster.
	nodes := startMembers(t, func(string) nodetest.Options {
		return nodetest.Options{AuthFailures: -1, Panel: dashboard.Options{MaxSessions: 2}}
	})
	a, b, c := nodes[0], nodes[1], nodes[2]
	names := map[string]bool{}
	for _, n := range nodes {
		names[n.Router().Panel().CookieName()] = true
	}
	if len(names) != 1 {
		t.Fatalf("the members name their session cookie differently: %v", names)
	}

	// Signed in on a, the cookie opens b and c at once.
	first, csrf := signedIn(t, a)
	for _, n := range []*node.Node{b, c} {
		cl := with(t, n, first)
		if code, _, doc := cl.do("GET", "/admin/session", "", nil); code != 200 || doc["signed_in"] != true || doc["csrf_token"] != csrf {
			t.Errorf("a's session on %s: %d %v", n.Cluster().ID(), code, doc)
		}
		if code, _, doc := cl.do("GET", "/admin/api/stats", "", nil); code != 200 {
			t.Errorf("a's session reading %s's API: %d %v", n.Cluster().ID(), code, doc)
		}
		if code, _, doc := cl.do("POST", "/admin/api/stats/clear", "", map[string]string{"X-CSRF-Token": csrf, "Origin": n.URL()}); code != 200 {
			t.Errorf("a's session writing on %s: %d %v", n.Cluster().ID(), code, doc)
		}
		if code, _, doc := cl.do("POST", "/admin/api/stats/clear", "", nil); code != 403 || errCode(doc) != "csrf_failed" {
			t.Errorf("a write on %s without the token: %d %v", n.Cluster().ID(), code, doc)
		}
	}

	// The cap (2) is the cluster's: sessions made on b and c end a's
	// first one everywhere.
	second, _ := signedIn(t, b)
	third, thirdCSRF := signedIn(t, c)
	for _, n := range nodes {
		eventually(t, "the first session ended by the cap on "+n.Cluster().ID(), func() string {
			if code, _, _ := with(t, n, first).do("GET", "/admin/api/stats", "", nil); code != 401 {
				return fmt.Sprintf("first: %d", code)
			}
			return ""
		})
		for name, ck := range map[string]*http.Cookie{"second": second, "third": third} {
			if code, _, _ := with(t, n, ck).do("GET", "/admin/api/stats", "", nil); code != 200 {
				t.Errorf("%s on %s: %d", name, n.Cluster().ID(), code)
			}
		}
	}

	// Signed out on b (a session made on c): refused on b at once, and
	// on a and c; the other session lives on.
	if code, _, doc := with(t, b, third).do("DELETE", "/admin/session", "", map[string]string{"X-CSRF-Token": thirdCSRF}); code != 200 || doc["signed_in"] != false {
		t.Fatalf("sign-out on b: %d %v", code, doc)
	}
	if code, _, _ := with(t, b, third).do("GET", "/admin/api/stats", "", nil); code != 401 {
		t.Errorf("on b right after its sign-out: %d", code)
	}
	for _, n := range []*node.Node{a, c} {
		eventually(t, "the sign-out on b seen by "+n.Cluster().ID(), func() string {
			if code, _, doc := with(t, n, third).do("GET", "/admin/session", "", nil); doc["signed_in"] != false {
				return fmt.Sprintf("%d %v", code, doc)
			}
			if code, _, _ := with(t, n, third).do("GET", "/admin/api/stats", "", nil); code != 401 {
				return fmt.Sprintf("stats: %d", code)
			}
			return ""
		})
		if code, _, _ := with(t, n, second).do("GET", "/admin/api/stats", "", nil); code != 200 {
			t.Errorf("the other session on %s after the sign-out: %d", n.Cluster().ID(), code)
		}
	}
}
