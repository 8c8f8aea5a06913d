package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"fusion/cluster"
	"fusion/engine/demo"
	"fusion/node/nodetest"
)

// buildFusion builds ./cmd/fusion (this directory) into dir with version
// and build tags, and returns the binary's path. It builds -trimpath, as
// make test's go vet and the Homebrew formula do, so that the three share
// their compiled packages in the build cache.
func buildFusion(t *testing.T, dir, name, version, tags string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	args := []string{"build", "-trimpath", "-o", out, "-ldflags", "-X main.version=" + version}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command("go", append(args, ".")...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return out
}

// rawCall sends method url with the test's key and body (may be "") and
// returns the status and the body.
func rawCall(t *testing.T, method, url, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer key")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestRollingUpgrade: three nodes of build 1.0.0 under steady load from
// clients of every node are replaced one at a time by build 1.1.0 (the
// current tree with the fusion_next tag: a field the old build does not
// know in the replicated drain record): fusion cluster drain through
// another node, SIGTERM, the new binary on the same data dir, fusion
// cluster undrain. The clients take a node out of their list only once
// it is drained (a load balancer following /health?ready would take it
// out sooner); no request fails at any time. The cluster's version view
// goes from all old through the mix to all new; a setting and an agent
// session written before are read after; while old nodes remain, the new
// field written by a new node survives an old node's read-modify-write
// (an old node refuses to set it, and shows it as it came).
func TestRollingUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fusion twice and starts processes")
	}
	dir := t.TempDir()
	const oldV, newV = "1.0.0", "1.1.0"
	oldBin := buildFusion(t, dir, "fusion-old", oldV, "")
	newBin := buildFusion(t, dir, "fusion-new", newV, "fusion_next")

	models := nodetest.Models(t)
	if _, err := demo.Create(filepath.Join(models, "solo"), demo.DefaultOptions()); err != nil {
		t.Fatal(err)
	}
	nodes := startProcCluster(t, dir, oldBin, func(int) string { return models }, "--drain-timeout", "10s", "--log-level", "debug")
	wait := func(what string, timeout time.Duration, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(timeout); !ok(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out after %v waiting for %s", timeout, what)
			}
		}
	}
	// versions is the cluster's version view from n: id → version of
	// the alive voters (nil when n does not answer or has no leader).
	versions := func(n *procNode) map[string]string {
		doc, err := n.status()
		if err != nil || doc.Leader == "" {
			return nil
		}
		out := map[string]string{}
		for _, m := range doc.Members {
			if m.Voter && m.Status == cluster.StatusAlive {
				out[m.ID] = m.Version
			}
		}
		return out
	}
	want := func(vs ...string) string {
		return fmt.Sprint(map[string]string{"p1": vs[0], "p2": vs[1], "p3": vs[2]})
	}
	allSee := func(view string) func() bool {
		return func() bool {
			for _, n := range nodes {
				if fmt.Sprint(versions(n)) != view {
					return false
				}
			}
			return true
		}
	}
	wait("three old voters", 60*time.Second, allSee(want(oldV, oldV, oldV)))

	// Written before the upgrade.
	if code, b := rawCall(t, http.MethodPut, nodes[0].http+"/admin/api/cluster/settings/upgrade-probe", `{"value":"written by 1.0.0"}`); code != http.StatusOK {
		t.Fatalf("setting: %d %s", code, b)
	}
	session := httpJSON(t, "POST", nodes[1].http+"/v1/openclaw/agent/sessions", map[string]any{"model": "demo", "system_prompt": "Be brief."})
	sid, _ := session["session_id"].(string)
	if sid == "" {
		t.Fatalf("create session: %v", session)
	}

	load := startLoad(nodes)
	cli := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 0 {
			t.Fatalf("fusion %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
		}
		return out.String()
	}
	versionsNow := []string{oldV, oldV, oldV}
	for i, n := range nodes {
		other := nodes[(i+1)%3]
		began := time.Now()
		out := cli("cluster", "drain", "--addr", other.http, "--api-key", "key", "--timeout", "90s", n.id)
		if !strings.Contains(out, "drained") {
			t.Fatalf("drain %s: %q", n.id, out)
		}
		drained := time.Since(began)
		if code, b := rawCall(t, http.MethodGet, n.http+"/health?ready", ""); code != http.StatusServiceUnavailable {
			t.Errorf("/health?ready of drained %s: %d %s", n.id, code, b)
		}
		// The drained node leaves the clients' list (in-flight requests
		// to its frontend end before it stops listening).
		load.drop(n)
		time.Sleep(200 * time.Millisecond)
		if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := n.cmd.Wait(); err != nil {
			t.Errorf("%s exited: %v", n.id, err)
		}
		n.bin = newBin
		n.start(t)
		versionsNow[i] = newV
		wait(n.id+" back on "+newV, 60*time.Second, allSee(want(versionsNow...)))
		cli("cluster", "undrain", "--addr", other.http, "--api-key", "key", n.id)
		wait(n.id+" ready", 30*time.Second, func() bool {
			code, _ := rawCall(t, http.MethodGet, n.http+"/health?ready", "")
			return code == http.StatusOK
		})
		load.add(n)
		t.Logf("%s: drained in %v, replaced by %s and serving %v after the drain began", n.id, drained.Round(time.Millisecond), newV, time.Since(began).Round(time.Millisecond))

		if i == 0 {
			roundTripNewField(t, nodes[0], nodes[1], nodes[2].id)
		}
		time.Sleep(2 * time.Second) // load on the mixed cluster
	}
	results := load.stop()

	failed := 0
	for _, r := range results {
		if r.err != nil {
			failed++
			t.Errorf("%s via %s at %s failed: %v", r.model, r.target, r.start.Format("15:04:05.000"), r.err)
		}
	}
	t.Logf("rolling upgrade %s → %s under load: %d requests, %d failed", oldV, newV, len(results), failed)
	fmt.Printf("rolling upgrade %s -> %s of 3 nodes under load: %d requests, %d failed\n", oldV, newV, len(results), failed)
	if len(results) < 50 {
		t.Errorf("only %d requests under load", len(results))
	}

	// Written before, read after, on every (new) node.
	for _, n := range nodes {
		code, b := rawCall(t, http.MethodGet, n.http+"/admin/api/cluster/settings/upgrade-probe", "")
		if code != http.StatusOK || !strings.Contains(string(b), `"value":"written by 1.0.0"`) {
			t.Errorf("setting on %s after the upgrade: %d %s", n.id, code, b)
		}
		got := httpJSON(t, "GET", n.http+"/v1/openclaw/agent/sessions/"+sid, nil)
		if got["session_id"] != sid {
			t.Errorf("session on %s after the upgrade: %v", n.id, got)
		}
	}
	for _, n := range nodes {
		n.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, n := range nodes {
		n.cmd.Wait()
	}
}

// roundTripNewField: a new node writes the drain record's new field
// (reason) for target; an old node refuses to set it (it does not know
// it) but shows it as it came, and its undrain (a read-modify-write)
// keeps it; the new node reads it back.
func roundTripNewField(t *testing.T, newNode, oldNode *procNode, target string) {
	t.Helper()
	path := "/admin/api/cluster/nodes/" + target
	const reason = `"reason":"rolling upgrade to 1.1.0"`
	code, b := rawCall(t, http.MethodPost, newNode.http+path+"/drain", "{"+reason+"}")
	if code != http.StatusAccepted || !strings.Contains(string(b), reason) {
		t.Fatalf("new node: drain with a reason: %d %s", code, b)
	}
	if code, b := rawCall(t, http.MethodPost, oldNode.http+path+"/drain", `{"reason":"x"}`); code != http.StatusBadRequest {
		t.Errorf("old node took a field it does not know: %d %s", code, b)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, b = rawCall(t, http.MethodGet, oldNode.http+path+"/drain", "")
		if code == http.StatusOK && strings.Contains(string(b), reason) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("old node's view of the record: %d %s", code, b)
		}
	}
	if code, b := rawCall(t, http.MethodPost, oldNode.http+path+"/undrain", ""); code != http.StatusAccepted || !strings.Contains(string(b), reason) {
		t.Fatalf("old node: undrain: %d %s", code, b)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, b = rawCall(t, http.MethodGet, newNode.http+path+"/drain", "")
		var rec map[string]any
		if code == http.StatusOK && json.Unmarshal(b, &rec) == nil && rec["drain"] == false && strings.Contains(string(b), reason) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("new node's view after the old node's undrain: %d %s", code, b)
		}
	}
}
