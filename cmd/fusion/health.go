package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

const healthUsage = `usage: fusion health [flags]

Asks a node for GET /health and exits 0 when it answers 200, 1 otherwise:
a health check for containers and scripts that needs no curl.
`

func runHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("health", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, healthUsage); fs.PrintDefaults() }
	f := addClusterAdminFlags(fs, 5*time.Second)
	quiet := fs.Bool("q", false, "print nothing on success")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	ctx, cancel := context.WithTimeout(ctx, *f.timeout)
	defer cancel()
	_, body, err := f.get(ctx, "/health", 1<<20)
	if err == nil && !*quiet {
		_, err = stdout.Write(body)
	}
	return err
}
