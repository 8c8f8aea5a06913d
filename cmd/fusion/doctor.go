package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"fusion/cluster"
	"fusion/engine/backend/mlx"
	"fusion/engine/runner"
)

const doctorUsage = `usage: fusion doctor [flags]

Checks what a node needs and prints what to fix: its settings (the same
flags, environment and --config as fusion serve), the data and models
directories, disk space and memory, the MLX library, the ports it listens
on, and — when a node runs there (--addr) — its health, the cluster's
leader and members, and the clock skew to each member. Exits 1 when a
check fails (warnings do not).
`

// checkResult is one line of the doctor's report.
type checkResult struct {
	Check  string `json:"check"`
	Status string `json:"status"` // ok, warn, fail
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// doctor's thresholds.
const (
	doctorMinFreeDisk = 10 << 30 // warn below this free in the data dir
	doctorMaxSkew     = 2 * time.Second
)

func runDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// The serve flags come first; doctor's own are taken out of args.
	var rest []string
	addr, caFile, apiKey, asJSON := "", "", "", false
	for i := 0; i < len(args); i++ {
		name, val, hasVal := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		switch name {
		case "addr", "ca", "doctor-api-key":
			if !hasVal {
				if i+1 >= len(args) {
					return usagef("--%s needs a value", name)
				}
				i++
				val = args[i]
			}
			switch name {
			case "addr":
				addr = val
			case "ca":
				caFile = val
			default:
				apiKey = val
			}
		case "json":
			asJSON = true
		case "h", "help":
			fmt.Fprint(stderr, doctorUsage)
			fmt.Fprintln(stderr, "  --addr URL   a running node to check (health, cluster, clock skew)\n  --ca FILE    CA to trust for an https:// --addr\n  --json       print the report as JSON\n  and every fusion serve flag (fusion serve -h)")
			return flag.ErrHelp
		default:
			rest = append(rest, args[i])
		}
	}
	var results []checkResult
	add := func(check, status, detail, fix string) {
		results = append(results, checkResult{check, status, detail, fix})
	}
	s, err := resolveServe(rest, os.Getenv, io.Discard)
	if err != nil {
		add("settings", "fail", err.Error(), "fix the flag, variable or config key named")
		return report(stdout, results, asJSON)
	}
	add("settings", "ok", "flags, environment and config file resolve", "")
	if apiKey == "" {
		apiKey = s.cfg.APIKey
	}
	checkDirs(s.cfg.DataDir, s.cfg.ModelsDir, add)
	checkMemory(add)
	if err := mlx.Available(); err != nil {
		add("mlx", "warn", "MLX unavailable: "+err.Error(), "the CPU backend serves; on a Mac, brew install mlx and make build-mlx (or set FUSION_MLXC)")
	} else {
		path, version := mlx.Library()
		add("mlx", "ok", fmt.Sprintf("libmlxc %s (MLX %s)", path, version), "")
	}
	running := false
	if addr != "" {
		running = checkRunning(ctx, addr, caFile, apiKey, add)
	}
	if !running {
		checkPorts(s, add)
	}
	return report(stdout, results, asJSON)
}

func checkDirs(dataDir, modelsDir string, add func(check, status, detail, fix string)) {
	for _, d := range []struct{ name, dir string }{{"data dir", dataDir}, {"models dir", modelsDir}} {
		st, err := os.Stat(d.dir)
		switch {
		case errors.Is(err, os.ErrNotExist):
			add(d.name, "warn", d.dir+" does not exist yet", "fusion serve creates it; check the path is the one you mean")
			continue
		case err != nil:
			add(d.name, "fail", err.Error(), "fix the path or its permissions")
			continue
		case !st.IsDir():
			add(d.name, "fail", d.dir+" is not a directory", "point the setting at a directory")
			continue
		}
		probe, err := os.CreateTemp(d.dir, ".doctor-*")
		if err != nil {
			add(d.name, "fail", d.dir+" is not writable: "+err.Error(), "chown it to the user fusion runs as")
			continue
		}
		probe.Close()
		os.Remove(probe.Name())
		add(d.name, "ok", d.dir, "")
	}
	var fs unix.Statfs_t
	if dir := existingParent(dataDir); unix.Statfs(dir, &fs) == nil {
		free := int64(fs.Bavail) * int64(fs.Bsize)
		if free < doctorMinFreeDisk {
			add("disk", "warn", fmt.Sprintf("%s free under %s", gib(free), dir), "models and the prefix cache's SSD tier need room: free space or move --data-dir")
		} else {
			add("disk", "ok", fmt.Sprintf("%s free under %s", gib(free), dir), "")
		}
	}
	if st, err := os.Stat(modelsDir); err == nil && st.IsDir() {
		r, err := runner.New(runner.Config{ModelsDir: modelsDir, CacheHotBytes: -1, CacheSSDBytes: -1})
		if err != nil {
			add("models", "fail", err.Error(), "")
			return
		}
		defer r.Close()
		models, err := r.Models(context.Background())
		switch {
		case err != nil:
			add("models", "fail", err.Error(), "")
		case len(models) == 0:
			add("models", "warn", "no model in "+modelsDir, "copy a model folder there (or fusion models create-demo)")
		default:
			ids := make([]string, len(models))
			for i, m := range models {
				ids[i] = m.ID
			}
			add("models", "ok", fmt.Sprintf("%d: %s", len(ids), strings.Join(ids, ", ")), "")
		}
	}
}

func existingParent(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || d == filepath.Dir(d) {
			return d
		}
	}
}

func gib(b int64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

func checkMemory(add func(check, status, detail, fix string)) {
	total, free := runner.TotalRAM(), runner.FreeRAM()
	if total == 0 {
		add("memory", "warn", "unknown on this system", "")
		return
	}
	add("memory", "ok", fmt.Sprintf("%s total, %s free", gib(total), gib(free)), "")
}

// checkPorts tries to bind every address the node would listen on.
func checkPorts(s *serveSettings, add func(check, status, detail, fix string)) {
	addrs := []struct{ name, addr string }{{"http", s.cfg.Listen}}
	if s.cfg.Cluster.Enabled() {
		g, r, gr, err := s.cfg.Cluster.Listeners()
		if err != nil {
			add("ports", "fail", err.Error(), "fix --cluster-listen")
			return
		}
		addrs = append(addrs, struct{ name, addr string }{"gossip", g}, struct{ name, addr string }{"raft", r}, struct{ name, addr string }{"grpc", gr})
	}
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a.addr)
		if err != nil {
			add("port "+a.name, "fail", a.addr+": "+err.Error(), "stop what holds the port (a node already running? pass --addr to check it) or choose another")
			continue
		}
		ln.Close()
		add("port "+a.name, "ok", a.addr+" is free", "")
	}
}

// checkRunning checks a running node: its health, and when clustered the
// leader, the members and the clock skew to each. It reports whether the
// node answered.
func checkRunning(ctx context.Context, addr, caFile, apiKey string, add func(check, status, detail, fix string)) bool {
	client, err := nodeClient(caFile)
	if err != nil {
		add("node", "fail", err.Error(), "")
		return false
	}
	get := func(url string) (*http.Response, []byte, time.Time, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, nil, time.Time{}, err
		}
		if apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+apiKey)
		}
		sent := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return nil, nil, time.Time{}, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		return resp, body, sent.Add(time.Since(sent) / 2), nil
	}
	base := nodeURL(addr)
	resp, _, _, err := get(base + "/health")
	if err != nil || resp.StatusCode != http.StatusOK {
		detail := fmt.Sprint(err)
		if err == nil {
			detail = resp.Status
		}
		add("node", "fail", base+"/health: "+detail, "start it (fusion serve, or fusion service status) or check --addr")
		return false
	}
	add("node", "ok", base+" answers /health", "")
	resp, body, _, err := get(base + cluster.AdminPath)
	if err != nil || resp.StatusCode == http.StatusNotFound {
		add("cluster", "ok", "a lone node (not clustered)", "")
		return true
	}
	var doc cluster.StatusDoc
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &doc) != nil {
		add("cluster", "warn", fmt.Sprintf("status: %s", resp.Status), "pass the admin key (--doctor-api-key) to check the cluster")
		return true
	}
	if doc.Leader == "" {
		add("cluster", "fail", "no leader", "a majority of voters must be up and reach each other (ports gossip, raft, grpc; the same --cluster-secret)")
	} else {
		add("cluster", "ok", fmt.Sprintf("leader %s, %d members", doc.Leader, len(doc.Members)), "")
	}
	for _, m := range doc.Members {
		if m.Status != "alive" {
			add("member "+m.ID, "warn", "status "+m.Status, "check that machine (fusion doctor there)")
			continue
		}
		resp, _, mid, err := get(strings.TrimRight(m.HTTP, "/") + "/health")
		if err != nil {
			add("member "+m.ID, "warn", "unreachable from here: "+err.Error(), "")
			continue
		}
		theirs, err := http.ParseTime(resp.Header.Get("Date"))
		if err != nil {
			add("member "+m.ID, "warn", "no Date header to compare clocks", "")
			continue
		}
		// Date has a resolution of a second: subtract it before judging.
		skew := time.Duration(math.Abs(float64(theirs.Sub(mid))))
		if skew > doctorMaxSkew+time.Second {
			add("member "+m.ID, "warn", fmt.Sprintf("clock %v off this machine's", skew.Round(time.Second)), "run NTP on both (timed on macOS, systemd-timesyncd or chrony on Linux)")
		} else {
			add("member "+m.ID, "ok", fmt.Sprintf("alive, clock within %v", doctorMaxSkew+time.Second), "")
		}
	}
	return true
}

// report prints the results and fails when one failed.
func report(w io.Writer, results []checkResult, asJSON bool) error {
	failed := 0
	for _, r := range results {
		if r.Status == "fail" {
			failed++
		}
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(results); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, r := range results {
			line := fmt.Sprintf("%s\t%s\t%s", r.Status, r.Check, r.Detail)
			if r.Fix != "" && r.Status != "ok" {
				line += "\t→ " + r.Fix
			}
			fmt.Fprintln(tw, line)
		}
		tw.Flush()
	}
	if failed > 0 {
		return fmt.Errorf("%d check(s) failed", failed)
	}
	return nil
}
