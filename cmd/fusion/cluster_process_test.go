package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"fusion/cluster"
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
}

func (p *procNode) start(t *testing.T) {
	t.Helper()
	b, _ := json.Marshal(p.args)
	cmd := exec.Command(os.Args[0], "-test.run=^TestClusterProcessChild$")
	if p.netns != "" {
		cmd = exec.Command("ip", "netns", "exec", p.netns, os.Args[0], "-test.run=^TestClusterProcessChild$")
	}
	cmd.Env = append(os.Environ(), "FUSION_CLUSTER_CHILD_ARGS="+string(b))
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
func TestClusterProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	ports := freePorts(t, 12)
	var join []string
	for i := range 3 {
		join = append(join, "127.0.0.1:"+strconv.Itoa(ports[4*i+1]))
	}
	var nodes []*procNode
	for i := range 3 {
		id := fmt.Sprintf("p%d", i+1)
		p := func(k int) string { return "127.0.0.1:" + strconv.Itoa(ports[4*i+k]) }
		nodes = append(nodes, &procNode{id: id, http: "http://" + p(0), log: filepath.Join(dir, id+".log"), args: []string{
			"serve", "--listen", p(0), "--data-dir", filepath.Join(dir, id), "--api-key", "key",
			"--node-id", id, "--cluster-listen", p(1), "--raft-listen", p(2), "--grpc-listen", p(3),
			"--join", strings.Join(join, ","), "--bootstrap-expect", "3", "--cluster-secret", "s3cret",
			"--drain-timeout", "5s", "--log-level", "debug",
		}})
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
				t.Logf("%s log tail:\n%s", n.id, tail(string(b), 3000))
			}
		}
	})
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
	if err := dead.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	dead.cmd.Wait()
	elected := waitDoc("a new leader", 15*time.Second, rest, func(d cluster.StatusDoc) bool {
		return d.Leader != "" && d.Leader != leader
	})
	failed := waitDoc("the killed leader marked failed", 30*time.Second, rest, func(d cluster.StatusDoc) bool {
		for _, m := range d.Members {
			if m.ID == leader {
				return m.Status == "failed"
			}
		}
		return false
	})
	t.Logf("SIGKILL of leader %s: new leader after %v, marked failed after %v", leader, elected, failed)

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

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
