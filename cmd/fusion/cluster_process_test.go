package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"fusion/cluster"
	"fusion/engine/demo"
	"fusion/node/nodetest"
)

// TestClusterProcessChild is not a test: it is the `fusion` entry point
// for the child processes of TestClusterProcesses.
func TestClusterProcessChild(t *testing.T) {
	raw := os.Getenv("FUSION_CLUSTER_CHILD_ARGS")
	if raw == "" {
		t.Skip("only runs as a child of TestClusterProcesses")
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, args, os.Stdout, os.Stderr))
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

type procNode struct {
	id, http string
	args     []string
	cmd      *exec.Cmd
	log      string
	netns    string // run inside this network namespace
	bin      string // a fusion binary to run instead of the test binary
}

func (p *procNode) start(t *testing.T) {
	t.Helper()
	b, _ := json.Marshal(p.args)
	cmd := exec.Command(os.Args[0], "-test.run=^TestClusterProcessChild$")
	if p.netns != "" {
		cmd = exec.Command("ip", "netns", "exec", p.netns, os.Args[0], "-test.run=^TestClusterProcessChild$")
	}
	cmd.Env = append(os.Environ(), "FUSION_CLUSTER_CHILD_ARGS="+string(b))
	if p.bin != "" {
		cmd = exec.Command(p.bin, p.args...)
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.cmd = cmd
}

func (p *procNode) status() (cluster.StatusDoc, error) {
	var doc cluster.StatusDoc
	req, _ := http.NewRequest(http.MethodGet, p.http+"/admin/api/cluster", nil)
	req.Header.Set("Authorization", "Bearer key")
	c := http.Client{Timeout: time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return doc, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return doc, fmt.Errorf("status %d", resp.StatusCode)
	}
	return doc, json.NewDecoder(resp.Body).Decode(&doc)
}

// TestClusterProcesses: three real `fusion serve` processes started with
// one command line form a cluster; the leader is killed with SIGKILL and
// the others elect a new one and mark it failed; it restarts on its data
// dir and rejoins as a voter; SIGTERM makes every node leave and exit 0.
//
// Under steady load: every node has the model "demo" (served where the
// request lands) and p1 and p2 have "solo", so p3 forwards every "solo"
// request. Success is counted outside and inside the kill window (from
// the kill until the survivors mark the dead node failed), forwarded
// requests apart.
func TestClusterProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	models, withSolo := nodetest.Models(t), nodetest.Models(t)
	if _, err := demo.Create(filepath.Join(withSolo, "solo"), demo.DefaultOptions()); err != nil {
		t.Fatal(err)
	}
	nodes := startProcCluster(t, dir, "", func(i int) string {
		if i < 2 {
			return withSolo
		}
		return models
	}, "--drain-timeout", "5s", "--log-level", "debug")
	waitDoc := func(what string, timeout time.Duration, on []*procNode, ok func(cluster.StatusDoc) bool) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			all := true
			for _, n := range on {
				doc, err := n.status()
				if err != nil || !ok(doc) {
					all = false
					break
				}
			}
			if all {
				return time.Since(start)
			}
			if time.Since(start) > timeout {
				t.Fatalf("timed out after %v waiting for %s", timeout, what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	voters := func(doc cluster.StatusDoc, status string) int {
		n := 0
		for _, m := range doc.Members {
			if m.Voter && m.Status == status {
				n++
			}
		}
		return n
	}
	var leader string
	waitDoc("one cluster of three voters", 60*time.Second, nodes, func(d cluster.StatusDoc) bool {
		if d.Leader == "" || leader != "" && d.Leader != leader || voters(d, "alive") != 3 {
			return false
		}
		leader = d.Leader
		return true
	})
	var dead *procNode
	var rest []*procNode
	for _, n := range nodes {
		if n.id == leader {
			dead = n
		} else {
			rest = append(rest, n)
		}
	}
	// Steady inference load through every node; the clients drop the
	// killed node from their list at the kill, as a load balancer would
	// (the nodes themselves keep forwarding to it until gossip says it
	// is dead).
	// An agent session created on the leader, with one turn served by
	// another node; both survive the leader's death.
	session := httpJSON(t, "POST", dead.http+"/v1/openclaw/agent/sessions", map[string]any{"model": "demo", "system_prompt": "Be brief."})
	sid, _ := session["session_id"].(string)
	if sid == "" {
		t.Fatalf("create session: %v", session)
	}
	turn := httpJSON(t, "POST", rest[0].http+"/v1/openclaw/agent/turns?session_id="+sid, map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": "hello"}}, "max_tokens": 4})
	if turn["turn"] != 1.0 {
		t.Fatalf("turn on %s: %v", rest[0].id, turn)
	}
	before := httpJSON(t, "GET", rest[0].http+"/v1/openclaw/agent/sessions/"+sid, nil)

	load := startLoad(nodes)
	time.Sleep(3 * time.Second)
	killed := time.Now()
	load.drop(dead)
	if err := dead.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	dead.cmd.Wait()
	elected := waitDoc("a new leader", 15*time.Second, rest, func(d cluster.StatusDoc) bool {
		return d.Leader != "" && d.Leader != leader
	})
	elected = time.Since(killed) // from the kill, not from the wait's start
	waitDoc("the killed leader marked failed", 30*time.Second, rest, func(d cluster.StatusDoc) bool {
		for _, m := range d.Members {
			if m.ID == leader {
				return m.Status == "failed"
			}
		}
		return false
	})
	failed := time.Since(killed)
	t.Logf("SIGKILL of leader %s: new leader %v after the kill, marked failed %v after it", leader, elected, failed)
	// The kill window: from the kill until the dead node is marked failed
	// (routing has stopped using it by then).
	window := killed.Add(failed)
	time.Sleep(5 * time.Second)
	results := load.stop()
	// Forwarded: "solo" sent to p3, which never has it.
	var in, inOK, out, outOK, inFwd, inFwdOK, outFwd, outFwdOK, onDead int
	for _, r := range results {
		if r.target == dead.id && r.start.Before(killed) && !r.end.Before(killed) {
			// Sent to the killed process's own HTTP frontend and still
			// open when it died: no cluster can answer those.
			onDead++
			continue
		}
		fwd := r.model == "solo" && r.target == "p3"
		if fwd && r.err == nil && (r.servedBy == "p3" || r.servedBy == "") {
			t.Errorf("a solo request to p3 was served by %q", r.servedBy)
		}
		if !r.start.Before(killed) && r.start.Before(window) {
			in++
			if r.err == nil {
				inOK++
			}
			if fwd {
				inFwd++
				if r.err == nil {
					inFwdOK++
				}
			}
			continue
		}
		out++
		if r.err == nil {
			outOK++
		}
		if fwd {
			outFwd++
			if r.err == nil {
				outFwdOK++
			}
		}
	}
	// The session outlived the node that created it (the old leader).
	after := httpJSON(t, "GET", rest[1].http+"/v1/openclaw/agent/sessions/"+sid, nil)
	if after["turn_count"] != 1.0 || fmt.Sprint(after["messages"]) != fmt.Sprint(before["messages"]) {
		t.Errorf("session after the kill: %v; before: %v", after, before)
	}
	turn = httpJSON(t, "POST", rest[1].http+"/v1/openclaw/agent/turns?session_id="+sid, map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": "again"}}, "max_tokens": 4})
	if turn["turn"] != 2.0 {
		t.Errorf("turn after the kill on %s: %v", rest[1].id, turn)
	}
	rate := float64(outOK) / float64(max(out, 1))
	t.Logf("inference under SIGKILL of the leader: %d/%d requests outside the kill window (%v) succeeded (%.2f%%); %d/%d inside it; forwarded (solo via p3): %d/%d outside, %d/%d inside; %d open on the killed node's own frontend when it died (not counted)",
		outOK, out, window.Sub(killed).Round(time.Millisecond), 100*rate, inOK, in, outFwdOK, outFwd, inFwdOK, inFwd, onDead)
	fmt.Printf("cluster kill -9: %d/%d requests outside the kill window succeeded (%.2f%%; forwarded %d/%d), %d/%d inside the %v window (forwarded %d/%d); new leader %v after the kill, marked failed %v after it\n",
		outOK, out, 100*rate, outFwdOK, outFwd, inOK, in, window.Sub(killed).Round(time.Millisecond), inFwdOK, inFwd, elected.Round(time.Millisecond), failed.Round(time.Millisecond))
	if outFwd < 10 || outFwdOK < outFwd*99/100 {
		t.Errorf("forwarded requests outside the kill window: %d/%d succeeded; want >= 99%% of at least 10", outFwdOK, outFwd)
	}
	if out < 20 || rate < 0.99 || outFwdOK < outFwd*99/100 {
		for _, r := range results {
			if r.err != nil && (r.start.Before(killed) || !r.start.Before(window)) {
				t.Logf("%s via %s failed at %v: %v", r.model, r.target, r.start.Sub(killed).Round(time.Millisecond), r.err)
			}
		}
		t.Errorf("%d/%d requests outside the kill window succeeded; want >= 99%% of at least 20", outOK, out)
	}

	dead.start(t) // same data dir, same ports
	back := waitDoc("the restarted node back as a voter", 30*time.Second, nodes, func(d cluster.StatusDoc) bool {
		return d.Leader != "" && voters(d, "alive") == 3
	})
	t.Logf("restarted node rejoined after %v", back)

	for _, n := range nodes {
		n.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, n := range nodes {
		done := make(chan error, 1)
		go func() { done <- n.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s exited: %v", n.id, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not exit after SIGTERM", n.id)
		}
	}
}

// startProcCluster starts three `fusion serve` processes, p1 to p3, that
// form one cluster (--bootstrap-expect 3) on free loopback ports with the
// API key "key": bin runs them ("": the test binary), node i serves
// modelsFor(i), extra are more flags. What is still running at the end of
// the test is killed, and the logs of a failed test are printed.
func startProcCluster(t *testing.T, dir, bin string, modelsFor func(i int) string, extra ...string) []*procNode {
	t.Helper()
	ports := freePorts(t, 12)
	var join []string
	for i := range 3 {
		join = append(join, "127.0.0.1:"+strconv.Itoa(ports[4*i+1]))
	}
	var nodes []*procNode
	for i := range 3 {
		id := fmt.Sprintf("p%d", i+1)
		p := func(k int) string { return "127.0.0.1:" + strconv.Itoa(ports[4*i+k]) }
		nodes = append(nodes, &procNode{id: id, http: "http://" + p(0), log: filepath.Join(dir, id+".log"), bin: bin, args: append([]string{
			"serve", "--listen", p(0), "--data-dir", filepath.Join(dir, id), "--api-key", "key",
			"--node-id", id, "--cluster-listen", p(1), "--raft-listen", p(2), "--grpc-listen", p(3),
			"--join", strings.Join(join, ","), "--bootstrap-expect", "3", "--cluster-secret", "s3cret",
			"--models-dir", modelsFor(i), "--threads", "1",
		}, extra...)})
	}
	for _, n := range nodes {
		n.start(t)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			if n.cmd != nil && n.cmd.ProcessState == nil {
				n.cmd.Process.Kill()
				n.cmd.Wait()
			}
		}
		if t.Failed() {
			for _, n := range nodes {
				b, _ := os.ReadFile(n.log)
				t.Logf("%s log tail:\n%s", n.id, tail(string(b), 4000))
			}
		}
	})
	return nodes
}

// httpJSON sends body (nil: none) with the test's key and decodes the
// JSON answer, failing the test on a non-200.
func httpJSON(t *testing.T, method, url string, body any) map[string]any {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Authorization", "Bearer key")
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &out) != nil {
		t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, raw)
	}
	return out
}

// loadResult is one request of the steady load.
type loadResult struct {
	start, end    time.Time
	target, model string
	servedBy      string // X-Fusion-Node
	err           error
}

// steadyLoad sends small chat completions round-robin over its nodes from
// a few clients until stopped, for "demo" and "solo" in turn.
type steadyLoad struct {
	mu      sync.Mutex
	targets []*procNode
	results []loadResult
	stopped chan struct{}
	wg      sync.WaitGroup
}

func startLoad(nodes []*procNode) *steadyLoad {
	l := &steadyLoad{targets: slices.Clone(nodes), stopped: make(chan struct{})}
	client := &http.Client{Timeout: 30 * time.Second}
	for c := range 3 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := c; ; i++ {
				select {
				case <-l.stopped:
					return
				default:
				}
				l.mu.Lock()
				target := l.targets[i%len(l.targets)]
				l.mu.Unlock()
				model := []string{"demo", "solo"}[i/len(nodes)%2]
				start := time.Now()
				by, err := chatOnce(client, target.http, model)
				l.mu.Lock()
				l.results = append(l.results, loadResult{start: start, end: time.Now(), target: target.id, model: model, servedBy: by, err: err})
				l.mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	return l
}

// add puts n (back) into the clients' list.
func (l *steadyLoad) add(n *procNode) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.targets = append(l.targets, n)
}

// drop takes n out of the clients' list.
func (l *steadyLoad) drop(n *procNode) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.targets = slices.DeleteFunc(l.targets, func(p *procNode) bool { return p == n })
}

func (l *steadyLoad) stop() []loadResult {
	close(l.stopped)
	l.wg.Wait()
	return l.results
}

// chatOnce sends one short greedy chat completion, checks the answer and
// returns the node that ran it.
func chatOnce(c *http.Client, base, model string) (string, error) {
	body := `{"model":"` + model + `","messages":[{"role":"user","content":"hello"}],"max_tokens":4,"temperature":0}`
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer key")
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", err
	}
	if len(out.Choices) != 1 || out.Choices[0].FinishReason == "" {
		return "", fmt.Errorf("answer without a finished choice: %+v", out)
	}
	by := resp.Header.Get("X-Fusion-Node")
	if by == "" {
		return "", errors.New("no X-Fusion-Node header")
	}
	return by, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
