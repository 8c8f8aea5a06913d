package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	pb "fusion/cluster/clusterpb"
)

// TestRaftHandshake: raft connections need the cluster secret.
func TestRaftHandshake(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := &streamLayer{Listener: ln, auth: NewAuth("right"), timeout: time.Second}
	defer server.Close()
	accepted := make(chan []byte, 4)
	go func() {
		for {
			c, err := server.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4)
			_, err = io.ReadFull(c, buf)
			c.Close()
			if err == nil {
				accepted <- buf
			}
		}
	}()
	tests := []struct {
		name   string
		auth   *Auth
		accept bool
	}{
		{"same secret", NewAuth("right"), true},
		{"wrong secret", NewAuth("wrong"), false},
		{"no secret", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := &streamLayer{auth: tc.auth, timeout: 300 * time.Millisecond}
			c, err := client.Dial(raft.ServerAddress(ln.Addr().String()), time.Second)
			if err == nil {
				c.Write([]byte("ping"))
				defer c.Close()
			}
			select {
			case got := <-accepted:
				if !tc.accept || string(got) != "ping" {
					t.Fatalf("accepted %q", got)
				}
			case <-time.After(1500 * time.Millisecond):
				if tc.accept {
					t.Fatalf("refused (dial err %v)", err)
				}
			}
		})
	}
}

// TestGossipNeedsSecret: a node with another secret cannot join.
func TestGossipNeedsSecret(t *testing.T) {
	a := testNode(t, "a", t.TempDir(), nil, 0, "one")
	b := testNode(t, "b", t.TempDir(), []string{a.GossipAddr()}, 0, "two")
	time.Sleep(time.Second)
	if n := a.ml.NumMembers(); n != 1 {
		t.Fatalf("a sees %d members", n)
	}
	if n := b.ml.NumMembers(); n != 1 {
		t.Fatalf("b sees %d members", n)
	}
}

func selfSigned(t *testing.T) (*tls.Config, *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fusion-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12},
		&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// TestTLS: bootstrap checks and forwarded writes run over gRPC with TLS
// and the token; a plaintext client is refused.
func TestTLS(t *testing.T) {
	server, client := selfSigned(t)
	withTLS := func(c *Config) { c.ServerTLS, c.ClientTLS = server, client }
	a := testNode(t, "a", t.TempDir(), nil, 2, "s", withTLS)
	b := testNode(t, "b", t.TempDir(), []string{a.GossipAddr()}, 2, "s", withTLS)
	nodes := []*Member{a, b}
	leader := waitLeader(t, nodes, 10*time.Second)
	follower := a
	if leader == a {
		follower = b
	}
	if _, err := follower.Apply(context.Background(), &pb.SettingPut{Key: "k", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	waitSameState(t, nodes)
	conn, err := grpc.NewClient(leader.GRPCAddr(), DialOptions(NewAuth("s"), nil)...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := pb.NewClusterClient(conn).Status(ctx, &pb.StatusRequest{}); err == nil {
		t.Fatal("plaintext call to a TLS server succeeded")
	}
}
