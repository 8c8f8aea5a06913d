package tlsreload

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fusion/internal/testenv"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fusion/cluster"
)

// pairFiles issues a certificate for 127.0.0.1 from caCert/caKey into
// dir/node.crt and dir/node.key and returns its serial.
func pairFiles(t *testing.T, dir string, caCert, caKey []byte) string {
	t.Helper()
	cert, key, err := cluster.IssueCert(caCert, caKey, "node", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Key first, then certificate: the watcher may read in between; a
	// mismatched pair must not be served.
	if err := os.WriteFile(filepath.Join(dir, "node.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "node.crt"), cert, 0o644); err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(cert)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String()
}

// servedSerial handshakes with a TLS listener using cfg and returns the
// serial of the certificate it presented.
func servedSerial(t *testing.T, cfg *tls.Config, roots *x509.CertPool) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

func TestReloadAndWatch(t *testing.T) {
	caCert, caKey, err := cluster.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caCert)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key")
	first := pairFiles(t, dir, caCert, caKey)

	var logs testenv.SyncBuffer
	c, err := Load(certFile, keyFile, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.Config()
	if got := servedSerial(t, cfg, roots); got != first {
		t.Fatalf("served %s, want %s", got, first)
	}
	if changed, err := c.Reload(); changed || err != nil {
		t.Errorf("reload of unchanged files: changed %v, err %v", changed, err)
	}

	// Explicit reload.
	second := pairFiles(t, dir, caCert, caKey)
	if got := servedSerial(t, cfg, roots); got != first {
		t.Errorf("served %s before the reload, want still %s", got, first)
	}
	if changed, err := c.Reload(); !changed || err != nil {
		t.Fatalf("reload: changed %v, err %v", changed, err)
	}
	if got := servedSerial(t, cfg, roots); got != second {
		t.Errorf("served %s after the reload, want %s", got, second)
	}

	// A broken certificate file: an error, the current pair stays.
	if err := os.WriteFile(certFile, []byte("-----BEGIN CERTIFICATE-----\ngarbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reload(); err == nil {
		t.Error("a broken certificate reloaded without an error")
	}
	if got := servedSerial(t, cfg, roots); got != second {
		t.Errorf("served %s after a failed reload, want %s", got, second)
	}

	// The watcher: the failure is logged once, a new pair is picked up.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Watch(ctx, 5*time.Millisecond) }()
	wait(t, func() bool { return strings.Contains(logs.String(), "new certificate not loaded") })
	time.Sleep(50 * time.Millisecond)
	if n := strings.Count(logs.String(), "new certificate not loaded"); n != 1 {
		t.Errorf("the same failure logged %d times", n)
	}
	third := pairFiles(t, dir, caCert, caKey)
	wait(t, func() bool { return servedSerial(t, cfg, roots) == third })
	cancel()
	<-done
	if !strings.Contains(logs.String(), "certificate reloaded") {
		t.Errorf("no reload in the log: %s", logs.String())
	}
}

func TestLoadErrors(t *testing.T) {
	caCert, caKey, err := cluster.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pairFiles(t, dir, caCert, caKey)
	other := t.TempDir()
	pairFiles(t, other, caCert, caKey)
	crt, key := filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key")
	for _, tc := range []struct {
		name, cert, key, want string
	}{
		{"no key", crt, "", "go together"},
		{"missing file", crt, filepath.Join(dir, "none.key"), "no such file"},
		{"key of another certificate", crt, filepath.Join(other, "node.key"), "private key does not match"},
		{"certificate as key", crt, crt, "tls"},
	} {
		if _, err := Load(tc.cert, tc.key, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := Load(crt, key, nil); err != nil {
		t.Errorf("the good pair: %v", err)
	}
}

func wait(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}
