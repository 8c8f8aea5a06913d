package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"fusion/cluster"
)

// netnsLab is three network namespaces on a bridge: node i is 10.201.n.i,
// reachable from the test (root namespace, 10.201.n.254). Taking a node's
// bridge port down cuts it off from everyone.
type netnsLab struct {
	suffix string
	net    int // third octet: 10.201.<net>.0/24, so two runs do not collide
}

func (l *netnsLab) ip(i int) string { return fmt.Sprintf("10.201.%d.%d", l.net, i) }

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func (l *netnsLab) ns(i int) string   { return fmt.Sprintf("fz%d%s", i, l.suffix) }
func (l *netnsLab) port(i int) string { return fmt.Sprintf("fzv%d%s", i, l.suffix) }
func (l *netnsLab) peer(i int) string { return fmt.Sprintf("fzp%d%s", i, l.suffix) }
func (l *netnsLab) bridge() string    { return "fzbr" + l.suffix }

func (l *netnsLab) setup(n int) error {
	if err := ipCmd("link", "add", l.bridge(), "type", "bridge"); err != nil {
		return err
	}
	steps := [][]string{
		{"addr", "add", l.ip(254) + "/24", "dev", l.bridge()},
		{"link", "set", l.bridge(), "up"},
	}
	for i := 1; i <= n; i++ {
		steps = append(steps,
			[]string{"netns", "add", l.ns(i)},
			[]string{"link", "add", l.port(i), "type", "veth", "peer", "name", l.peer(i)},
			[]string{"link", "set", l.peer(i), "netns", l.ns(i)},
			[]string{"link", "set", l.port(i), "master", l.bridge()},
			[]string{"link", "set", l.port(i), "up"},
			[]string{"netns", "exec", l.ns(i), "ip", "addr", "add", l.ip(i) + "/24", "dev", l.peer(i)},
			[]string{"netns", "exec", l.ns(i), "ip", "link", "set", l.peer(i), "up"},
			[]string{"netns", "exec", l.ns(i), "ip", "link", "set", "lo", "up"},
		)
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return err
		}
	}
	return nil
}

func (l *netnsLab) teardown(n int) {
	for i := 1; i <= n; i++ {
		_ = ipCmd("netns", "del", l.ns(i))
		_ = ipCmd("link", "del", l.port(i))
	}
	_ = ipCmd("link", "del", l.bridge())
}

// casIn/casOut: each successful write stores a unique value, so a value
// names a version and "expect the version I read" is "expect that value".
type casIn struct {
	read          bool
	expect, value string
}

type casOut struct {
	value       string
	ok, unknown bool
}

var casModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{""} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(string), input.(casIn), output.(casOut)
		switch {
		case in.read:
			if out.value == s {
				return []any{s}
			}
			return nil
		case out.unknown:
			if s == in.expect {
				return []any{s, in.value}
			}
			return []any{s}
		case out.ok:
			if s == in.expect {
				return []any{in.value}
			}
			return nil
		case s != in.expect:
			return []any{s}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(casIn), output.(casOut)
		if in.read {
			return fmt.Sprintf("read() -> %q", out.value)
		}
		return fmt.Sprintf("cas(%q -> %q) ok=%v unknown=%v", in.expect, in.value, out.ok, out.unknown)
	},
}

// isolatedOp is one settings write the client inside the isolated
// namespace attempted: the register's CAS or a plain put of its own key.
type isolatedOp struct {
	Key    string `json:"key"`
	Expect string `json:"expect"` // the register's value it expected (CAS)
	Value  string `json:"value"`
	Call   int64  `json:"call"` // unix nanoseconds
	Return int64  `json:"return"`
	Code   int    `json:"code"` // 0: no HTTP answer
	Err    string `json:"err,omitempty"`
}

// isolatedReport is what the isolated client prints when it is done.
type isolatedReport struct {
	Ops           []isolatedOp `json:"ops"`
	AppliedBefore uint64       `json:"applied_before"`
	AppliedAfter  uint64       `json:"applied_after"`
}

// TestNetnsIsolatedClientChild is not a test: run inside the isolated
// node's network namespace by TestClusterPartitionNetns, it writes through
// that node for FUSION_NETNS_CLIENT's duration — CAS on the shared
// register (expecting the version the node reads locally) and plain puts
// of the key "iso", each given up after 1 s — and prints an
// isolatedReport.
func TestNetnsIsolatedClientChild(t *testing.T) {
	raw := os.Getenv("FUSION_NETNS_CLIENT")
	if raw == "" {
		t.Skip("only runs as a child of TestClusterPartitionNetns")
	}
	var cfg struct {
		URL string        `json:"url"`
		For time.Duration `json:"for"`
	}
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	// Shorter than the 5 s the node holds a write without a leader, so
	// each worker tries several times; the parent heals only once the
	// node has given up on the last attempt.
	client := &http.Client{Timeout: time.Second}
	send := func(method, url, body string) (int, []byte, error) {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer key")
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, b, err
	}
	applied := func() uint64 {
		_, b, _ := send(http.MethodGet, cfg.URL+"/admin/api/cluster", "")
		var doc cluster.StatusDoc
		_ = json.Unmarshal(b, &doc)
		return doc.AppliedIndex
	}
	rep := isolatedReport{AppliedBefore: applied()}
	deadline := time.Now().Add(cfg.For)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				op := isolatedOp{Key: "iso", Value: fmt.Sprintf("iso-%d-%d", w, i)}
				body := fmt.Sprintf(`{"value":%q}`, op.Value)
				if w%2 == 0 {
					// A stale local read is all the minority can give.
					var cur cluster.SettingDoc
					code, b, err := send(http.MethodGet, cfg.URL+"/admin/api/cluster/settings/reg", "")
					if err != nil || code != http.StatusOK && code != http.StatusNotFound {
						time.Sleep(50 * time.Millisecond)
						continue
					}
					_ = json.Unmarshal(b, &cur)
					op.Key, op.Expect = "reg", cur.Value
					body = fmt.Sprintf(`{"value":%q,"expect_version":%d}`, op.Value, cur.Version)
				}
				op.Call = time.Now().UnixNano()
				code, _, err := send(http.MethodPut, cfg.URL+"/admin/api/cluster/settings/"+op.Key, body)
				op.Return, op.Code = time.Now().UnixNano(), code
				if err != nil {
					op.Err = err.Error()
				}
				mu.Lock()
				rep.Ops = append(rep.Ops, op)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	rep.AppliedAfter = applied()
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		t.Fatal(err)
	}
}

// TestClusterPartitionNetns: three `fusion serve` processes in their own
// network namespaces under a steady load of settings compare-and-set and
// linearizable reads over HTTP. The leader's link is cut: the majority
// elects a leader and keeps committing, while a client inside the cut-off
// namespace writes through the old leader and gets no write acknowledged
// (the minority commits nothing: its applied index stands still and,
// after healing, none of its values is ever read). After healing the
// nodes converge and the clients' history, the isolated client's
// attempts included as unknown outcomes, checks linearizable with
// porcupine.
func TestClusterPartitionNetns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipped: network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipped: no ip command (iproute2)")
	}
	lab := &netnsLab{suffix: fmt.Sprint(os.Getpid() % 100000), net: os.Getpid() % 250}
	if err := lab.setup(3); err != nil {
		lab.teardown(3)
		t.Skipf("skipped: cannot build network namespaces here: %v", err)
	}
	dir := t.TempDir()
	var nodes []*procNode
	join := lab.ip(1) + ":7946," + lab.ip(2) + ":7946," + lab.ip(3) + ":7946"
	for i := 1; i <= 3; i++ {
		ip := lab.ip(i)
		id := fmt.Sprintf("ns%d", i)
		nodes = append(nodes, &procNode{id: id, http: "http://" + ip + ":8000", netns: lab.ns(i), log: filepath.Join(dir, id+".log"),
			args: []string{"serve", "--listen", ip + ":8000", "--data-dir", filepath.Join(dir, id), "--api-key", "key",
				"--node-id", id, "--cluster-listen", ip + ":7946", "--join", join, "--bootstrap-expect", "3",
				"--cluster-secret", "s3cret", "--drain-timeout", "5s", "--log-level", "debug"}})
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
				t.Logf("%s log tail:\n%s", n.id, tail(string(b), 30000))
			}
		}
		lab.teardown(3)
	})

	agree := func(on []*procNode, ok func(cluster.StatusDoc) bool) bool {
		for _, n := range on {
			doc, err := n.status()
			if err != nil || !ok(doc) {
				return false
			}
		}
		return true
	}
	waitUntil := func(what string, timeout time.Duration, cond func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !cond() {
			if time.Since(start) > timeout {
				t.Fatalf("timed out after %v waiting for %s", timeout, what)
			}
			time.Sleep(50 * time.Millisecond)
		}
		return time.Since(start)
	}
	var leader string
	waitUntil("one cluster of three voters", 60*time.Second, func() bool {
		leader = ""
		return agree(nodes, func(d cluster.StatusDoc) bool {
			v := 0
			for _, m := range d.Members {
				if m.Voter && m.Status == "alive" {
					v++
				}
			}
			if d.Leader == "" || leader != "" && d.Leader != leader || v != 3 {
				return false
			}
			leader = d.Leader
			return true
		})
	})

	// The workload: CAS and consistent reads of one setting through random
	// reachable nodes.
	client := &http.Client{Timeout: 3 * time.Second}
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	var (
		mu       sync.Mutex
		ops      []porcupine.Operation
		stop     atomic.Bool
		cut      atomic.Int64 // index+1 of the isolated node
		okDuring atomic.Int64
		wg       sync.WaitGroup
	)
	do := func(method, url, body string) (int, cluster.SettingDoc, error) {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer key")
		resp, err := client.Do(req)
		if err != nil {
			return 0, cluster.SettingDoc{}, err
		}
		defer resp.Body.Close()
		var doc cluster.SettingDoc
		if resp.StatusCode == http.StatusOK {
			err = json.NewDecoder(resp.Body).Decode(&doc)
		}
		return resp.StatusCode, doc, err
	}
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var version uint64
			var value string
			mustRead := true
			for i := 0; !stop.Load(); i++ {
				k := rand.IntN(3)
				if int(cut.Load()) == k+1 {
					continue // unreachable from here
				}
				url := nodes[k].http + "/admin/api/cluster/settings/reg"
				if mustRead || rand.IntN(2) == 0 {
					call := now()
					code, doc, err := do(http.MethodGet, url+"?consistent", "")
					ret := now()
					if err == nil && (code == http.StatusOK || code == http.StatusNotFound) {
						version, value, mustRead = doc.Version, doc.Value, false
						mu.Lock()
						ops = append(ops, porcupine.Operation{ClientId: c, Input: casIn{read: true}, Call: call, Output: casOut{value: doc.Value}, Return: ret})
						mu.Unlock()
					}
					continue
				}
				newValue := fmt.Sprintf("c%d-%d", c, i)
				body := fmt.Sprintf(`{"value":%q,"expect_version":%d}`, newValue, version)
				call := now()
				code, _, err := do(http.MethodPut, url, body)
				ret := now()
				out := casOut{}
				switch {
				case err == nil && code == http.StatusOK:
					out.ok = true
					if cut.Load() != 0 {
						okDuring.Add(1)
					}
				case err == nil && code == http.StatusConflict:
					mustRead = true
				default:
					out.unknown, ret = true, math.MaxInt64
				}
				mu.Lock()
				ops = append(ops, porcupine.Operation{ClientId: c, Input: casIn{expect: value, value: newValue}, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)

	var li int
	var majority []*procNode
	for i, n := range nodes {
		if n.id == leader {
			li = i
		} else {
			majority = append(majority, n)
		}
	}
	cut.Store(int64(li + 1))
	if err := ipCmd("link", "set", lab.port(li+1), "down"); err != nil {
		t.Fatal(err)
	}
	// The client inside the cut-off namespace, writing through the old
	// leader for 3 s.
	isoCfg, _ := json.Marshal(map[string]any{"url": nodes[li].http, "for": 3 * time.Second})
	iso := exec.Command("ip", "netns", "exec", lab.ns(li+1), os.Args[0], "-test.run=^TestNetnsIsolatedClientChild$")
	iso.Env = append(os.Environ(), "FUSION_NETNS_CLIENT="+string(isoCfg))
	var isoOut, isoErr bytes.Buffer
	iso.Stdout, iso.Stderr = &isoOut, &isoErr
	if err := iso.Start(); err != nil {
		t.Fatal(err)
	}
	elected := waitUntil("a majority leader", 15*time.Second, func() bool {
		l := ""
		return agree(majority, func(d cluster.StatusDoc) bool {
			if d.Leader == "" || d.Leader == leader || l != "" && d.Leader != l {
				return false
			}
			l = d.Leader
			return true
		})
	})
	time.Sleep(3 * time.Second) // the majority serves
	isoWait := time.Now()
	if err := iso.Wait(); err != nil {
		t.Fatalf("isolated client: %v\n%s%s", err, isoErr.String(), isoOut.String())
	}
	isoWaited := time.Since(isoWait)
	var isoRep isolatedReport
	// The report is the last line (the test binary may print PASS after it).
	for _, line := range strings.Split(isoOut.String(), "\n") {
		if strings.HasPrefix(line, "{") {
			if err := json.Unmarshal([]byte(line), &isoRep); err != nil {
				t.Fatalf("isolated client report: %v: %s", err, line)
			}
		}
	}
	isoCodes := map[int]int{}
	for _, op := range isoRep.Ops {
		isoCodes[op.Code]++
		if op.Code == http.StatusOK {
			t.Errorf("the cut-off old leader acknowledged %s=%q", op.Key, op.Value)
		}
		if op.Key == "reg" { // unknown outcome: may take effect any time
			mu.Lock() // the majority's clients are still appending
			ops = append(ops, porcupine.Operation{ClientId: 100, Input: casIn{expect: op.Expect, value: op.Value},
				Call: op.Call - start.UnixNano(), Output: casOut{unknown: true}, Return: math.MaxInt64})
			mu.Unlock()
		}
	}
	if len(isoRep.Ops) < 8 || isoRep.AppliedAfter != isoRep.AppliedBefore || isoRep.AppliedBefore == 0 {
		t.Fatalf("isolated client: %d writes (want >= 8), applied index %d → %d (want unchanged)", len(isoRep.Ops), isoRep.AppliedBefore, isoRep.AppliedAfter)
	}
	// The node retries a write it could not commit for up to 5 s (its
	// hold timeout), even after the client gave up: heal only after that,
	// so "none of its values is ever read" means the minority committed
	// nothing rather than "a retry landed after healing".
	var lastCall int64
	for _, op := range isoRep.Ops {
		lastCall = max(lastCall, op.Call)
	}
	time.Sleep(time.Until(time.Unix(0, lastCall).Add(cluster.DefaultHoldTimeout + time.Second)))
	if err := ipCmd("link", "set", lab.port(li+1), "up"); err != nil {
		t.Fatal(err)
	}
	cut.Store(0)
	time.Sleep(2 * time.Second)
	stop.Store(true)
	wg.Wait()
	if okDuring.Load() == 0 {
		t.Fatal("the majority committed nothing during the partition")
	}
	converged := waitUntil("the healed cluster to converge", 30*time.Second, func() bool {
		var idx uint64
		l := ""
		return agree(nodes, func(d cluster.StatusDoc) bool {
			if d.Leader == "" || l != "" && d.Leader != l || idx != 0 && d.AppliedIndex != idx {
				return false
			}
			l, idx = d.Leader, d.AppliedIndex
			return true
		})
	})
	t.Logf("leader %s cut off: majority leader after %v, %d writes committed by the majority during the cut; converged %v after healing; %d operations",
		leader, elected, okDuring.Load(), converged, len(ops))
	t.Logf("isolated client: %d writes through the old leader, answers by status %v, none acknowledged; applied index held at %d; waited %v for it after the majority's 3 s",
		len(isoRep.Ops), isoCodes, isoRep.AppliedAfter, isoWaited.Round(time.Millisecond))

	// None of the isolated client's values ever became visible: no read
	// of the register returned one, and its own key does not exist.
	for _, op := range ops {
		if in := op.Input.(casIn); in.read && strings.HasPrefix(op.Output.(casOut).value, "iso-") {
			t.Errorf("a client read %q, written by the cut-off minority", op.Output.(casOut).value)
		}
	}
	for _, n := range nodes {
		for _, key := range []string{"reg", "iso"} {
			req, _ := http.NewRequest(http.MethodGet, n.http+"/admin/api/cluster/settings/"+key+"?consistent", nil)
			req.Header.Set("Authorization", "Bearer key")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var doc cluster.SettingDoc
			_ = json.NewDecoder(resp.Body).Decode(&doc)
			resp.Body.Close()
			if key == "iso" && resp.StatusCode != http.StatusNotFound || strings.HasPrefix(doc.Value, "iso-") {
				t.Errorf("%s after healing: %s = %d %+v; the minority's writes must not exist", n.id, key, resp.StatusCode, doc)
			}
		}
	}

	model := casModel.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, ops, time.Minute)
	if res != porcupine.Ok {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("fusion-netns-history-%d.html", os.Getpid()))
		_ = porcupine.VisualizePath(model, info, path)
		if f, err := os.Create(strings.TrimSuffix(path, ".html") + ".txt"); err == nil {
			for _, op := range ops {
				fmt.Fprintf(f, "%d %d %d %s\n", op.ClientId, op.Call, op.Return, casModel.DescribeOperation(op.Input, op.Output))
			}
			f.Close()
		}
		t.Fatalf("history is %s (visualization: %s)", res, path)
	}

	for _, n := range nodes {
		n.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, n := range nodes {
		done := make(chan error, 1)
		go func() { done <- n.cmd.Wait() }()
		select {
		case err := <-done:
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Errorf("%s: %v", n.id, err)
			} else if err != nil {
				t.Errorf("%s exited: %v", n.id, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not exit after SIGTERM", n.id)
		}
	}
}
