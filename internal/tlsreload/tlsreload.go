// Package tlsreload serves a TLS certificate and key from files and picks up
// new ones without a restart: on Reload (the server calls it on SIGHUP) and
// when Watch sees the files' contents change (a renewal by certbot, a
// rotated secret mounted by an orchestrator). A new pair that does not
// load is reported and the current one stays in use, so a half-written
// renewal never takes the frontend down.
package tlsreload

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Certificate is a certificate and key loaded from two PEM files, safe for
// concurrent use: GetCertificate serves the current pair to handshakes
// while Reload replaces it.
type Certificate struct {
	certFile, keyFile string
	log               *slog.Logger

	mu  sync.Mutex // serializes reloads
	cur atomic.Pointer[pair]
}

// pair is one loaded certificate with the file contents it came from.
type pair struct {
	cert            *tls.Certificate
	certPEM, keyPEM []byte
}

// Load reads the certificate and key files; it fails when they do not
// hold a matching PEM pair.
func Load(certFile, keyFile string, log *slog.Logger) (*Certificate, error) {
	if certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("tls: the certificate and key files go together")
	}
	if log == nil {
		log = slog.Default()
	}
	c := &Certificate{certFile: certFile, keyFile: keyFile, log: log}
	p, err := c.read()
	if err != nil {
		return nil, err
	}
	c.cur.Store(p)
	return c, nil
}

func (c *Certificate) read() (*pair, error) {
	certPEM, err := os.ReadFile(c.certFile)
	if err != nil {
		return nil, fmt.Errorf("tls certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls key: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls: %s and %s: %w", c.certFile, c.keyFile, err)
	}
	return &pair{cert: &cert, certPEM: certPEM, keyPEM: keyPEM}, nil
}

// Reload reads the files again and serves the new pair to the next
// handshakes when they changed. On an error the current pair stays.
func (c *Certificate) Reload() (changed bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.read()
	if err != nil {
		return false, err
	}
	old := c.cur.Load()
	if bytes.Equal(old.certPEM, p.certPEM) && bytes.Equal(old.keyPEM, p.keyPEM) {
		return false, nil
	}
	c.cur.Store(p)
	return true, nil
}

// GetCertificate is tls.Config.GetCertificate.
func (c *Certificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.cur.Load().cert, nil
}

// Leaf is the certificate being served.
func (c *Certificate) Leaf() *x509.Certificate { return c.cur.Load().cert.Leaf }

// Config is a server TLS configuration serving the current pair (TLS 1.2
// and later; the HTTP server adds HTTP/2 to its protocols).
func (c *Certificate) Config() *tls.Config {
	return &tls.Config{GetCertificate: c.GetCertificate, MinVersion: tls.VersionTLS12}
}

// Watch reloads the pair every interval until ctx is done, logging each
// change and each failure (once per distinct error, so a broken file does
// not flood the log).
func (c *Certificate) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := c.Reload()
		switch {
		case err != nil:
			if err.Error() != lastErr {
				c.log.Error("tls: new certificate not loaded; still serving the previous one", "err", err)
			}
			lastErr = err.Error()
		case changed:
			lastErr = ""
			c.log.Info("tls: certificate reloaded", "subject", c.Leaf().Subject.String(), "not_after", c.Leaf().NotAfter)
		default:
			lastErr = ""
		}
	}
}
