package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"fusion/cluster"
)

const drainUsage = `usage: fusion cluster drain [flags] NODE

Drains NODE before it is stopped or upgraded, through any node of the
cluster (--addr): NODE stops getting new requests (its peers route
nothing to it, /health?ready answers 503), finishes what it runs, hands
leadership over if it leads, and the planner moves its placements to
other nodes. The command waits until NODE reports itself drained (safe
to stop) unless --wait=false. NODE stays drained, across restarts, until
fusion cluster undrain NODE.
`

const undrainUsage = `usage: fusion cluster undrain [flags] NODE

Takes a drain back: NODE serves again and its peers route to it.
`

func runClusterDrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return drainCommand(ctx, "drain", drainUsage, args, stdout, stderr)
}

func runClusterUndrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return drainCommand(ctx, "undrain", undrainUsage, args, stdout, stderr)
}

func drainCommand(ctx context.Context, action, usage string, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("cluster "+action, stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	f := addClusterAdminFlags(fs, 10*time.Minute)
	wait := true
	if action == "drain" {
		fs.BoolVar(&wait, "wait", true, "wait until the node is drained (bounded by --timeout)")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		return usagef("give the node id")
	}
	id := fs.Arg(0)
	ctx, cancel := context.WithTimeout(ctx, *f.timeout)
	defer cancel()
	path := cluster.AdminPath + "/nodes/" + url.PathEscape(id) + "/"
	target := nodeURL(*f.addr) + path + action
	if err := postDrain(ctx, f, target, stderr); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%s not recorded within --timeout %s: %w", action, *f.timeout, err)
		}
		return err
	}
	if action == "undrain" {
		fmt.Fprintf(stdout, "%s undrained: it serves again\n", id)
		return nil
	}
	if !wait {
		fmt.Fprintf(stdout, "%s draining\n", id)
		return nil
	}
	fmt.Fprintf(stderr, "%s draining: waiting for its requests, leadership and placements to move…\n", id)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		_, body, err := f.get(ctx, path+"drain?consistent", 1<<20)
		var rec cluster.DrainRecord
		if err == nil {
			err = json.Unmarshal(body, &rec)
		}
		switch {
		case err == nil && !rec.Drain:
			return fmt.Errorf("%s was undrained while waiting", id)
		case err == nil && rec.State == cluster.DrainStateDrained:
			fmt.Fprintf(stdout, "%s drained: safe to stop\n", id)
			return nil
		case err != nil && ctx.Err() == nil:
			fmt.Fprintf(stderr, "drain state not read (retrying): %v\n", err)
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%s not drained within --timeout %s (fusion cluster status shows what is left)", id, *f.timeout)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}

// postDrain records a drain or undrain. Both are idempotent, so a 503
// with Retry-After — the cluster has no leader for a moment, as during
// an election — or a 429 with Retry-After — the key's rate limit — is
// tried again after the time it asks for (at most 5 s) until ctx ends;
// any other answer but 202 is final.
func postDrain(ctx context.Context, f clusterAdminFlags, target string, stderr io.Writer) error {
	for {
		resp, err := f.do(ctx, http.MethodPost, target, nil)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if resp.StatusCode == http.StatusAccepted {
			return nil
		}
		msg := fmt.Errorf("%s: %s: %s", target, resp.Status, strings.TrimSpace(string(b)))
		wait, retry := retryAfter(resp)
		if !retry {
			return msg
		}
		fmt.Fprintf(stderr, "%v (retrying in %v)\n", msg, wait)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last answer: %v)", ctx.Err(), msg)
		case <-time.After(wait):
		}
	}
}

// retryAfter reports whether a response asks to be tried again (503 or
// 429 with a Retry-After in seconds) and after how long, capped at 5 s.
func retryAfter(resp *http.Response) (time.Duration, bool) {
	if resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusTooManyRequests {
		return 0, false
	}
	n, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || n < 0 {
		return 0, false
	}
	return min(time.Duration(n)*time.Second, 5*time.Second), true
}
