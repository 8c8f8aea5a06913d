package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"fusion/cluster"
	"fusion/internal/atomicfile"
	"fusion/node"
)

const backupUsage = `usage: fusion cluster backup [flags] FILE

Writes a consistent backup of the cluster's replicated state to FILE:
placements, agent sessions, API keys, settings and the node catalog,
taken after a linearizable read, so every write acknowledged before the
command ran is in it. Any node can be asked.
`

const restoreUsage = `usage: fusion cluster restore [flags] FILE

Restores a backup made by fusion cluster backup into a running cluster,
normally a new one: its placements, sessions, API keys and settings come
back on every member; the cluster keeps its own members. A cluster that
already holds data refuses unless --force. The request goes to the leader
(a follower names it and the command follows).
`

// clusterAdminFlags are the flags every command that talks to a node's
// cluster API takes.
type clusterAdminFlags struct {
	addr, apiKey, caFile *string
	timeout              *time.Duration
}

func addClusterAdminFlags(fs interface {
	String(name, value, usage string) *string
	Duration(name string, value time.Duration, usage string) *time.Duration
}, timeout time.Duration) clusterAdminFlags {
	return clusterAdminFlags{
		addr:    fs.String("addr", "http://"+node.DefaultListen, "the node's HTTP address (https://… for a node with --tls-cert)"),
		apiKey:  fs.String("api-key", "", "API key of the node (env FUSION_API_KEY)"),
		caFile:  fs.String("ca", "", "PEM CA certificate to trust for an https:// address"),
		timeout: fs.Duration("timeout", timeout, "request timeout"),
	}
}

// get reads path of the node and returns its URL and body, or an error
// naming the URL with the answer's status and text when it is not a 200.
func (f clusterAdminFlags) get(ctx context.Context, path string, limit int64) (string, []byte, error) {
	url := nodeURL(*f.addr) + path
	resp, err := f.do(ctx, http.MethodGet, url, nil)
	if err != nil {
		return url, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return url, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return url, nil, fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return url, body, nil
}

// do sends one request to url with the API key.
func (f clusterAdminFlags) do(ctx context.Context, method, url string, body []byte) (*http.Response, error) {
	client, err := nodeClient(*f.caFile)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, usagef("--addr: %v", err)
	}
	key := *f.apiKey
	if key == "" {
		key = os.Getenv("FUSION_API_KEY")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", cluster.BackupContentType)
	}
	return client.Do(req)
}

func runClusterBackup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("cluster backup", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, backupUsage); fs.PrintDefaults() }
	f := addClusterAdminFlags(fs, time.Minute)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("give the backup file")
	}
	ctx, cancel := context.WithTimeout(ctx, *f.timeout)
	defer cancel()
	url := nodeURL(*f.addr) + cluster.AdminPath + "/backup"
	resp, err := f.do(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	// Written atomically: an interrupted backup never leaves a truncated
	// file under the name.
	var n int64
	if err := atomicfile.WriteMode(fs.Arg(0), 0o600, func(w io.Writer) error {
		n, err = io.Copy(w, resp.Body)
		return err
	}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %d bytes at applied index %s\n", fs.Arg(0), n, resp.Header.Get("X-Fusion-Backup-Index"))
	return nil
}

func runClusterRestore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("cluster restore", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, restoreUsage); fs.PrintDefaults() }
	f := addClusterAdminFlags(fs, 5*time.Minute)
	force := fs.Bool("force", false, "replace the data of a cluster that already holds some")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("give the backup file")
	}
	body, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *f.timeout)
	defer cancel()
	url := nodeURL(*f.addr)
	for range 2 { // the node asked, then the leader it names
		target := url + cluster.AdminPath + "/restore"
		if *force {
			target += "?force"
		}
		resp, err := f.do(ctx, http.MethodPost, target, body)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		var doc struct {
			Leader       string `json:"leader"`
			AppliedIndex uint64 `json:"applied_index"`
		}
		_ = json.Unmarshal(b, &doc)
		switch {
		case resp.StatusCode == http.StatusOK:
			fmt.Fprintf(stdout, "restored %s into the cluster (applied index %d)\n", fs.Arg(0), doc.AppliedIndex)
			return nil
		case resp.StatusCode == http.StatusMisdirectedRequest && doc.Leader != "":
			url = doc.Leader
			continue
		default:
			return fmt.Errorf("%s: %s: %s", target, resp.Status, strings.TrimSpace(string(b)))
		}
	}
	return fmt.Errorf("the leader moved during the restore; try again")
}
