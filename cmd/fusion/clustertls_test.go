package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fusion/cluster"
	pb "fusion/cluster/clusterpb"
)

// testCA is a cluster CA made by `fusion cluster certs init` in its own
// directory; issue runs `fusion cluster certs issue` there.
type testCA struct{ dir string }

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	fusion(t, "cluster", "certs", "init", "--dir", dir, "--name", name)
	return testCA{dir}
}

// issue returns the cert, key and CA files of a member certificate valid
// for the given hosts.
func (ca testCA) issue(t *testing.T, name string, hosts ...string) (certFile, keyFile, caFile string) {
	t.Helper()
	fusion(t, "cluster", "certs", "issue", "--dir", ca.dir, "--host", strings.Join(hosts, ","), name)
	return filepath.Join(ca.dir, name+".crt"), filepath.Join(ca.dir, name+".key"), filepath.Join(ca.dir, "ca.crt")
}

// fusion runs the command line args as main does and fails the test on
// a non-zero exit status.
func fusion(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb strings.Builder
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("fusion %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	return out.String()
}

func TestGRPCTLSFlags(t *testing.T) {
	ca, rogue := newTestCA(t, "fusion cluster CA"), newTestCA(t, "someone else")
	tlsFor := func(ca testCA, name string) (server, client *tls.Config) {
		t.Helper()
		cert, key, caf := ca.issue(t, name)
		s, err := resolveServe([]string{"--grpc-tls-cert", cert, "--grpc-tls-key", key, "--grpc-tls-ca", caf}, func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		c := s.cfg.Cluster
		if c.ServerTLS == nil || c.ClientTLS == nil {
			t.Fatalf("TLS settings not applied: %+v", c)
		}
		return c.ServerTLS, c.ClientTLS
	}
	aServer, aClient := tlsFor(ca, "a")
	bServer, bClient := tlsFor(ca, "b")
	rogueServer, rogueClient := tlsFor(rogue, "mallory")

	handshake := func(server, client *tls.Config) error {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
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
		c, err := tls.Dial("tcp", ln.Addr().String(), client)
		if err != nil {
			return err
		}
		defer c.Close()
		// TLS 1.3: a refused client certificate shows on the first read.
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		if err == io.EOF {
			err = nil
		}
		return err
	}
	if err := handshake(aServer, bClient); err != nil {
		t.Errorf("members of one CA: %v", err)
	}
	// Each side alone: a rogue client that trusts anyone, a rogue server
	// that asks for no certificate.
	trusting := rogueClient.Clone()
	trusting.VerifyConnection = nil
	if err := handshake(aServer, trusting); err == nil {
		t.Error("a client certificate of another CA was accepted")
	}
	lax := rogueServer.Clone()
	lax.ClientAuth = tls.NoClientCert
	if err := handshake(lax, aClient); err == nil {
		t.Error("a server certificate of another CA was accepted")
	}

	// Two members over mutual TLS: a write through the follower is
	// forwarded to the leader over gRPC and applied on both.
	member := func(id string, server, client *tls.Config, join []string) *cluster.Member {
		m, err := cluster.New(cluster.Config{
			NodeID: id, DataDir: t.TempDir(), GossipListen: "127.0.0.1:0", RaftListen: "127.0.0.1:0", GRPCListen: "127.0.0.1:0",
			HTTPAdvertise: "http://" + id + ".test", Join: join, BootstrapExpect: 2, Version: "test", Secret: "s",
			ServerTLS: server, ClientTLS: client, DeadServerGrace: time.Hour, Timing: cluster.TestTiming(),
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(context.Background()); err != nil {
			m.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	a := member("a", aServer, aClient, nil)
	b := member("b", bServer, bClient, []string{a.GossipAddr()})
	deadline := time.Now().Add(15 * time.Second)
	for !a.IsLeader() && !b.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("no leader over mutual TLS")
		}
		time.Sleep(20 * time.Millisecond)
	}
	follower := a
	if a.IsLeader() {
		follower = b
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := follower.Apply(ctx, &pb.SettingPut{Key: "tls", Value: []byte("yes")}); err != nil {
		t.Fatalf("write forwarded over mutual TLS: %v", err)
	}

	// The flags go together.
	cert, key, _ := ca.issue(t, "c")
	_, err := resolveServe([]string{"--grpc-tls-cert", cert, "--grpc-tls-key", key}, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "go together") {
		t.Errorf("cert and key without a CA: %v", err)
	}
}

// TestCertsCommands: what `fusion cluster certs` writes (modes, names,
// host names, validity within the CA's) and what it refuses.
func TestCertsCommands(t *testing.T) {
	ca := newTestCA(t, "test CA")
	certFile, keyFile, caFile := ca.issue(t, "mac1", "127.0.0.1", "mac1.local")
	for f, mode := range map[string]os.FileMode{caFile: 0o644, filepath.Join(ca.dir, "ca.key"): 0o600, certFile: 0o644, keyFile: 0o600} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", f, st.Mode().Perm(), mode)
		}
	}
	leaf := readCert(t, certFile)
	root := readCert(t, caFile)
	if leaf.Subject.CommonName != "mac1" || root.Subject.CommonName != "test CA" || !root.IsCA || leaf.IsCA {
		t.Errorf("names: leaf %q (CA %v), root %q (CA %v)", leaf.Subject.CommonName, leaf.IsCA, root.Subject.CommonName, root.IsCA)
	}
	if len(leaf.IPAddresses) != 1 || leaf.IPAddresses[0].String() != "127.0.0.1" || len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "mac1.local" {
		t.Errorf("host names: %v %v", leaf.IPAddresses, leaf.DNSNames)
	}
	pool := x509.NewCertPool()
	pool.AddCert(root)
	for _, host := range []string{"127.0.0.1", "mac1.local"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: host}); err != nil {
			t.Errorf("verify for %s: %v", host, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "other.local"}); err == nil {
		t.Error("a host the certificate does not name was accepted")
	}
	// A certificate never outlives its CA.
	fusion(t, "cluster", "certs", "issue", "--dir", ca.dir, "--days", "100000", "long")
	if long := readCert(t, filepath.Join(ca.dir, "long.crt")); long.NotAfter.After(root.NotAfter) {
		t.Errorf("issued until %v, after the CA's %v", long.NotAfter, root.NotAfter)
	}

	empty := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"cluster", "certs", "init", "--dir", ca.dir}, 1, "not overwriting a CA"},
		{[]string{"cluster", "certs", "init", "--dir", empty, "--days", "0"}, 2, "--days must be positive"},
		{[]string{"cluster", "certs", "issue", "--dir", empty, "n"}, 1, "no CA"},
		{[]string{"cluster", "certs", "issue", "--dir", ca.dir}, 2, "give one node name"},
		{[]string{"cluster", "certs", "issue", "--dir", ca.dir, "ca"}, 2, "cannot name a certificate file"},
		{[]string{"cluster", "certs", "issue", "--dir", ca.dir, "../x"}, 2, "cannot name a certificate file"},
		{[]string{"cluster", "certs", "issue", "--dir", ca.dir, "--days", "-1", "n"}, 2, "--days must be positive"},
	} {
		var out, errb strings.Builder
		code := run(context.Background(), tc.args, &out, &errb)
		if code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d (%s), want %d with %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
	// A CA key that is not the CA certificate's is refused.
	other := newTestCA(t, "other")
	key, _ := os.ReadFile(filepath.Join(other.dir, "ca.key"))
	if err := os.WriteFile(filepath.Join(ca.dir, "ca.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	var errb strings.Builder
	if code := run(context.Background(), []string{"cluster", "certs", "issue", "--dir", ca.dir, "n"}, io.Discard, &errb); code != 1 || !strings.Contains(errb.String(), "does not belong to the CA certificate") {
		t.Errorf("mismatched CA key: exit %d: %s", code, errb.String())
	}
}

func readCert(t *testing.T, file string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s: no PEM", file)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
