package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"fusion/cluster"
	"fusion/internal/atomicfile"
)

const certsInitUsage = `usage: fusion cluster certs init [flags]

Creates the cluster's certificate authority in --dir: ca.crt (give it to
every node) and ca.key (0600; it issues member certificates — keep it on
the machine you issue from, not on the nodes). Refuses to overwrite an
existing CA.
`

const certsIssueUsage = `usage: fusion cluster certs issue [flags] NAME

Issues a certificate for the node NAME, signed by the CA in --dir:
NAME.crt and NAME.key (0600). Then start the node with
  --grpc-tls-cert DIR/NAME.crt --grpc-tls-key DIR/NAME.key --grpc-tls-ca DIR/ca.crt
for mutual TLS between nodes, and, with --host set to the names clients
use, --tls-cert DIR/NAME.crt --tls-key DIR/NAME.key for HTTPS.
`

func certsCommands() map[string]command {
	return map[string]command{
		"init":  {summary: "create the cluster's CA (fusion cluster certs init -h)", run: runCertsInit},
		"issue": {summary: "issue a node certificate from the CA (fusion cluster certs issue -h)", run: runCertsIssue},
	}
}

func runCertsInit(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("cluster certs init", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, certsInitUsage); fs.PrintDefaults() }
	dir := fs.String("dir", "~/.fusion/certs", "directory of the CA and the certificates")
	name := fs.String("name", "fusion cluster CA", "the CA's common name")
	days := fs.Int("days", 3650, "validity in days")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if *days <= 0 {
		return usagef("--days must be positive")
	}
	d := expandHome(*dir)
	crt, key := filepath.Join(d, "ca.crt"), filepath.Join(d, "ca.key")
	for _, f := range []string{crt, key} {
		if _, err := os.Stat(f); err == nil {
			return fmt.Errorf("%s exists: not overwriting a CA (its members would stop trusting each other)", f)
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	certPEM, keyPEM, err := cluster.NewCA(*name, time.Duration(*days)*24*time.Hour)
	if err != nil {
		return err
	}
	if err := writeFiles(d, map[string][]byte{crt: certPEM}, map[string][]byte{key: keyPEM}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %s\n", crt, key)
	return nil
}

func runCertsIssue(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("cluster certs issue", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, certsIssueUsage); fs.PrintDefaults() }
	dir := fs.String("dir", "~/.fusion/certs", "directory of the CA and the certificates")
	hosts := fs.String("host", "", "comma-separated host names and IP addresses the certificate is valid for (HTTPS clients check them)")
	days := fs.Int("days", 825, "validity in days (at most the CA's)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("give one node name")
	}
	name := fs.Arg(0)
	if name == "ca" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return usagef("%q cannot name a certificate file", name)
	}
	if *days <= 0 {
		return usagef("--days must be positive")
	}
	d := expandHome(*dir)
	caCert, err := os.ReadFile(filepath.Join(d, "ca.crt"))
	if err != nil {
		return fmt.Errorf("no CA (run fusion cluster certs init first): %w", err)
	}
	caKey, err := os.ReadFile(filepath.Join(d, "ca.key"))
	if err != nil {
		return fmt.Errorf("the CA key: %w", err)
	}
	var hs []string
	for _, h := range strings.Split(*hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hs = append(hs, h)
		}
	}
	certPEM, keyPEM, err := cluster.IssueCert(caCert, caKey, name, hs, time.Duration(*days)*24*time.Hour)
	if err != nil {
		return err
	}
	crt, key := filepath.Join(d, name+".crt"), filepath.Join(d, name+".key")
	if err := writeFiles(d, map[string][]byte{crt: certPEM}, map[string][]byte{key: keyPEM}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %s\nserve with: --grpc-tls-cert %s --grpc-tls-key %s --grpc-tls-ca %s\n",
		crt, key, crt, key, filepath.Join(d, "ca.crt"))
	return nil
}

// writeFiles creates dir and writes public files 0644 and secret ones 0600,
// each atomically.
func writeFiles(dir string, public, secret map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for mode, files := range map[os.FileMode]map[string][]byte{0o644: public, 0o600: secret} {
		for path, data := range files {
			if err := atomicfile.WriteMode(path, mode, func(w io.Writer) error { _, err := w.Write(data); return err }); err != nil {
				return err
			}
		}
	}
	return nil
}
