package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fusion/internal/testenv"
	"io"
	"math/big"
	"net/http"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeHTTPS: `fusion serve --tls-cert --tls-key` with a certificate
// from `fusion cluster certs` serves HTTPS and HTTP/2 to a client that
// trusts the cluster's CA; a renewed certificate is served after SIGHUP
// without a restart, and a broken one leaves the previous one serving.
func TestServeHTTPS(t *testing.T) {
	ca := newTestCA(t, "https CA")
	certFile, keyFile, caFile := ca.issue(t, "node", "127.0.0.1")
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr testenv.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dir, "--threads", "1",
			"--tls-cert", certFile, "--tls-key", keyFile, "--tls-watch-interval", "0", "--log-format", "json"}, io.Discard, &stderr)
	}()
	var url string
	for deadline := time.Now().Add(20 * time.Second); url == ""; time.Sleep(10 * time.Millisecond) {
		if m := regexp.MustCompile(`serving on (https://\S+)`).FindStringSubmatch(stderr.String()); m != nil {
			url = m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no https address in the output: %s", stderr.String())
		}
	}
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(caFile)
	pool.AppendCertsFromPEM(pem)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true, DisableKeepAlives: true,
	}}
	// served returns the serial of the certificate the server presents.
	served := func() *big.Int {
		t.Helper()
		resp, err := client.Get(url + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			t.Fatalf("GET /health: %d over %s, want 200 over HTTP/2", resp.StatusCode, resp.Proto)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber
	}
	first := served()
	if want := readCert(t, certFile).SerialNumber; first.Cmp(want) != 0 {
		t.Fatalf("served serial %v, want the issued %v", first, want)
	}
	// fusion health: 0 with the CA, 1 without it and for a closed port.
	if out := fusion(t, "health", "--addr", url, "--ca", caFile, "--timeout", "60s"); !strings.Contains(out, `"status"`) {
		t.Errorf("fusion health printed %q", out)
	}
	for _, args := range [][]string{{"--addr", url}, {"--addr", "http://127.0.0.1:1"}} {
		if code := run(context.Background(), append([]string{"health", "--timeout", "60s"}, args...), io.Discard, io.Discard); code != 1 {
			t.Errorf("fusion health %v: exit %d, want 1", args, code)
		}
	}
	// fusion cluster status reaches an https:// node when told its CA (a
	// lone node has no cluster document: a 404 from the server, not a TLS
	// failure), and refuses the certificate without it.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ca", caFile}, "404"},
		{nil, "certificate signed by unknown authority"},
	} {
		var errb strings.Builder
		code := run(context.Background(), append([]string{"cluster", "status", "--addr", url, "--timeout", "60s"}, tc.args...), io.Discard, &errb)
		if code != 1 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("cluster status %v: exit %d: %s, want %q", tc.args, code, errb.String(), tc.want)
		}
	}
	// Plain HTTP to the HTTPS port gets no answer from the API.
	if resp, err := http.Get(strings.Replace(url, "https://", "http://", 1) + "/health"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP was served on the TLS port")
		}
	}

	hup := func() {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	// Renewed in place: served after SIGHUP (the watcher is off).
	ca.issue(t, "node", "127.0.0.1")
	renewed := readCert(t, certFile).SerialNumber
	if served().Cmp(first) != 0 {
		t.Fatal("the renewed certificate was served before SIGHUP with the watcher off")
	}
	hup()
	waitFor(t, "the renewed certificate after SIGHUP", func() bool { return served().Cmp(renewed) == 0 })

	// A broken key: SIGHUP logs it and the renewed certificate stays.
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	hup()
	waitFor(t, "the reload failure in the log", func() bool {
		return strings.Contains(stderr.String(), "certificate not reloaded; still serving the previous one")
	})
	if served().Cmp(renewed) != 0 {
		t.Error("a broken key replaced the served certificate")
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit status %d: %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
}

func TestServeTLSFlags(t *testing.T) {
	ca := newTestCA(t, "flags CA")
	certFile, keyFile, _ := ca.issue(t, "node")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", certFile}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-key", keyFile}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-cert", certFile, "--tls-key", keyFile, "--tls-watch-interval", "-1s"}, "is not a duration"},
	} {
		if _, err := resolveServe(tc.args, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	// A pair that does not load stops the node before it listens.
	var errb strings.Builder
	code := run(context.Background(), []string{"serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--tls-cert", certFile, "--tls-key", certFile}, io.Discard, &errb)
	if code != 1 || !strings.Contains(errb.String(), "tls") {
		t.Errorf("a certificate as its own key: exit %d: %s", code, errb.String())
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
