package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fusion/cluster"
	pb "fusion/cluster/clusterpb"
)

// testCA is a certificate authority for the TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return testCA{cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes a member certificate signed by ca (no host names: members
// are checked by their CA, not their address) and returns cert, key and
// CA file paths.
func (ca testCA) issue(t *testing.T, dir, name string) (certFile, keyFile, caFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, caFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"), filepath.Join(dir, name+"-ca.crt")
	for f, data := range map[string][]byte{
		certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyFile:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
		caFile:   ca.pem,
	} {
		if err := os.WriteFile(f, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile, caFile
}

// TestGRPCTLSFlags: --grpc-tls-cert/key/ca give mutual TLS between
// members: two members with certificates of the cluster's CA form a
// cluster and replicate over it; a handshake with a certificate of
// another CA fails on either side; the three flags go together.
func TestGRPCTLSFlags(t *testing.T) {
	dir := t.TempDir()
	ca, rogue := newTestCA(t, "fusion cluster CA"), newTestCA(t, "someone else")
	tlsFor := func(ca testCA, name string) (server, client *tls.Config) {
		t.Helper()
		cert, key, caf := ca.issue(t, dir, name)
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
	cert, key, _ := ca.issue(t, dir, "c")
	_, err := resolveServe([]string{"--grpc-tls-cert", cert, "--grpc-tls-key", key}, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "go together") {
		t.Errorf("cert and key without a CA: %v", err)
	}
}
