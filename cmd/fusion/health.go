package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"fusion/node"
)

const healthUsage = `usage: fusion health [flags]

Asks a node for GET /health and exits 0 when it answers 200, 1 otherwise:
a health check for containers and scripts that needs no curl.
`

func runHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("health", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, healthUsage); fs.PrintDefaults() }
	addr := fs.String("addr", "http://"+node.DefaultListen, "the node's HTTP address (https://… for a node with --tls-cert)")
	caFile := fs.String("ca", "", "PEM CA certificate to trust for an https:// address")
	timeout := fs.Duration("timeout", 5*time.Second, "request timeout")
	quiet := fs.Bool("q", false, "print nothing on success")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	client, err := nodeClient(*caFile)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	url := nodeURL(*addr) + "/health"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return usagef("--addr: %v", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	if !*quiet {
		_, err = stdout.Write(body)
	}
	return err
}
