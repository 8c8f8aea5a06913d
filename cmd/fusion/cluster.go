package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"fusion/cluster"
)

const clusterUsage = `usage: fusion cluster status [flags]  (fusion cluster secret prints a new cluster secret)

Prints a node's view of the cluster (GET /admin/api/cluster): itself, the
leader, every member with its gossip status and raft suffrage, and the
model placements. --json prints the document as the API returns it.
`

func clusterCommands() map[string]command {
	return map[string]command{
		"status":  {summary: "print a node's view of the cluster (fusion cluster status -h)", run: runClusterStatus},
		"backup":  {summary: "write a consistent backup of the replicated state to a file", run: runClusterBackup},
		"restore": {summary: "restore a backup into a (new) cluster", run: runClusterRestore},
		"drain":   {summary: "drain a node before stopping or upgrading it (fusion cluster drain -h)", run: runClusterDrain},
		"undrain": {summary: "let a drained node serve again", run: runClusterUndrain},
		"certs":   {summary: "the cluster's CA and node certificates for mutual TLS: init, issue", subs: certsCommands()},
		"secret":  {summary: "print a new random cluster secret (for --cluster-secret or --cluster-secret-file)", run: runClusterSecret},
	}
}

// runClusterSecret prints 32 random bytes, base64url, one line: a
// cluster secret.
func runClusterSecret(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("cluster secret", stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: fusion cluster secret\n\nPrints a new random cluster secret (256 bits). Give every node the same one:\n  fusion cluster secret > secret && chmod 600 secret\n  fusion serve --cluster-secret-file secret ...\n")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails: crypto/rand crashes the program rather than return an error
	_, err := fmt.Fprintln(stdout, base64.RawURLEncoding.EncodeToString(b))
	return err
}

func runClusterStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("cluster status", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, clusterUsage); fs.PrintDefaults() }
	f := addClusterAdminFlags(fs, 10*time.Second)
	asJSON := fs.Bool("json", false, "print the JSON document")
	consistent := fs.Bool("consistent", false, "read through the leader (linearizable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	path := cluster.AdminPath
	if *consistent {
		path += "?consistent"
	}
	ctx, cancel := context.WithTimeout(ctx, *f.timeout)
	defer cancel()
	url, body, err := f.get(ctx, path, 16<<20)
	if err != nil {
		return err
	}
	if *asJSON {
		_, err := stdout.Write(body)
		return err
	}
	var doc cluster.StatusDoc
	if err := json.Unmarshal(body, &doc); err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	printClusterStatus(stdout, doc)
	return nil
}

func printClusterStatus(w io.Writer, doc cluster.StatusDoc) {
	leader := doc.Leader
	if leader == "" {
		leader = "(none)"
	}
	fmt.Fprintf(w, "self %s, leader %s, applied index %d\n\n", doc.Self, leader, doc.AppliedIndex)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tRAFT\tDRAINING\tHTTP\tGRPC\tRTT")
	for _, m := range doc.Members {
		suffrage := "-"
		switch {
		case m.Leader:
			suffrage = "leader"
		case m.Voter:
			suffrage = "voter"
		case m.InRaft:
			suffrage = "non-voter"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%s\t%s\n", m.ID, m.Status, suffrage, m.Draining, m.HTTP, m.GRPC, rttRow(m.RTTMicros))
	}
	tw.Flush()
	if len(doc.Placements) == 0 {
		fmt.Fprintln(w, "\nno placements")
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tREPLICA\tGENERATION\tSTATE\tSTAGES")
	for _, p := range doc.Placements {
		var st []string
		for _, s := range p.Stages {
			if p.NumLayers > 0 {
				st = append(st, fmt.Sprintf("%s[%d,%d) %s", s.Node, s.Layers[0], s.Layers[1], s.State))
			} else {
				st = append(st, s.Node+" "+s.State)
			}
		}
		state := p.State
		if state == "" {
			state = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", p.Model, p.Replica, p.Generation, state, strings.Join(st, ", "))
	}
	tw.Flush()
}

// rttRow is "n2 610µs, n3 1.2ms": a member's published round trips to
// its peers, by peer id ("-" when none).
func rttRow(row map[string]int64) string {
	if len(row) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(row))
	for _, id := range slices.Sorted(maps.Keys(row)) {
		d := time.Duration(row[id]) * time.Microsecond
		if d < time.Millisecond {
			d = d.Round(10 * time.Microsecond)
		} else {
			d = d.Round(100 * time.Microsecond)
		}
		parts = append(parts, id+" "+d.String())
	}
	return strings.Join(parts, ", ")
}

// nodeClient is an HTTP client for a node's API, trusting caFile (PEM)
// for an https:// node when given.
func nodeClient(caFile string) (*http.Client, error) {
	if caFile == "" {
		return http.DefaultClient, nil
	}
	pem, err := os.ReadFile(expandHome(caFile))
	if err != nil {
		return nil, usagef("--ca: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, usagef("--ca: no PEM certificate in %s", caFile)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}, nil
}

// nodeURL is a node's base URL from an address with or without a scheme.
func nodeURL(addr string) string {
	url := strings.TrimRight(addr, "/")
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	return url
}
