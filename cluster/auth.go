package cluster

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// AuthMetadataKey is the gRPC metadata key carrying the cluster token.
const AuthMetadataKey = "x-fusion-cluster-token"

// Auth derives every inter-node credential from one cluster secret: the
// memberlist encryption key, the gRPC token and the raft handshake key,
// and the base of the cluster's named keys (Member.Key).
// A nil *Auth means no secret: everything is open (single machine, tests).
//
// For a rotation without downtime, other secrets may be accepted beside
// it (NewAuth's accept): credentials made from any of them are taken,
// while this node sends only those of the first.
type Auth struct {
	token      string   // hex HMAC, sent on every gRPC call
	tokens     []string // tokens accepted: token first, then the accepted secrets'
	gossipKey  []byte   // AES-256 key for memberlist
	gossipKeys [][]byte // decryption keys: gossipKey first
	raftKey    []byte   // HMAC key for the raft connection handshake
	raftKeys   [][]byte // handshake keys accepted: raftKey first
	keyBase    []byte   // HMAC key the named keys are derived with
}

// NewAuth returns the credentials for a secret, or nil for "". The
// accept secrets are also taken from other nodes (a rotation in
// progress); empty ones and repeats of secret are ignored.
func NewAuth(secret string, accept ...string) *Auth {
	if secret == "" {
		return nil
	}
	derive := func(secret, label string) []byte {
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	a := &Auth{keyBase: derive(secret, "fusion-cluster-keys-v1")}
	for _, s := range append([]string{secret}, accept...) {
		if s == "" || (s == secret && a.token != "") {
			continue
		}
		a.tokens = append(a.tokens, hex.EncodeToString(derive(s, "fusion-cluster-grpc-v1")))
		a.gossipKeys = append(a.gossipKeys, derive(s, "fusion-cluster-gossip-v1"))
		a.raftKeys = append(a.raftKeys, derive(s, "fusion-cluster-raft-v1"))
		if a.token == "" {
			a.token, a.gossipKey, a.raftKey = a.tokens[0], a.gossipKeys[0], a.raftKeys[0]
		}
	}
	return a
}

// key is the named key derived from the secret.
func (a *Auth) key(name string) []byte {
	m := hmac.New(sha256.New, a.keyBase)
	m.Write([]byte(name))
	return m.Sum(nil)
}

// GossipKey is the memberlist SecretKey (nil without a secret).
func (a *Auth) GossipKey() []byte {
	if a == nil {
		return nil
	}
	return a.gossipKey
}

// GossipKeyring is memberlist's keyring: gossip is encrypted with the
// secret's key and decrypted with any accepted one (nil without a secret).
func (a *Auth) GossipKeyring() (*memberlist.Keyring, error) {
	if a == nil {
		return nil, nil
	}
	return memberlist.NewKeyring(a.gossipKeys, a.gossipKey)
}

func (a *Auth) check(ctx context.Context) error {
	if a == nil {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(AuthMetadataKey)
	ok := 0
	if len(vals) == 1 {
		for _, t := range a.tokens { // every one compared: no early exit to time
			ok |= subtle.ConstantTimeCompare([]byte(vals[0]), []byte(t))
		}
	}
	if ok != 1 {
		return status.Error(codes.Unauthenticated, "cluster: missing or wrong cluster token")
	}
	return nil
}

// UnaryInterceptor rejects calls without the cluster token.
func (a *Auth) UnaryInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := a.check(ctx); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

// StreamInterceptor rejects streams without the cluster token.
func (a *Auth) StreamInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := a.check(ss.Context()); err != nil {
		return err
	}
	return h(srv, ss)
}

type tokenCreds struct {
	token  string
	secure bool
}

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{AuthMetadataKey: t.token}, nil
}

func (t tokenCreds) RequireTransportSecurity() bool { return t.secure }

// ServerOptions returns the gRPC server options every inter-node server
// (Cluster, Engine) uses: the token check and, with tlsConf, TLS.
func ServerOptions(a *Auth, tlsConf *tls.Config) []grpc.ServerOption {
	var opts []grpc.ServerOption
	if tlsConf != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConf)))
	}
	if a != nil {
		opts = append(opts, grpc.ChainUnaryInterceptor(a.UnaryInterceptor), grpc.ChainStreamInterceptor(a.StreamInterceptor))
	}
	return opts
}

// DialOptions returns the gRPC dial options for calling another node:
// the token on every call and TLS (or plaintext without tlsConf).
func DialOptions(a *Auth, tlsConf *tls.Config) []grpc.DialOption {
	var opts []grpc.DialOption
	if tlsConf != nil {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(tlsConf)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if a != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(tokenCreds{token: a.token, secure: tlsConf != nil}))
	}
	return opts
}

// ---- raft transport: a TCP stream layer with an HMAC challenge ----

const nonceSize = 32

var errHandshake = errors.New("cluster: raft handshake failed")

// streamLayer is raft's NetworkTransport stream layer on its own TCP
// port. With a secret, the acceptor sends a random nonce and the dialer
// must answer HMAC(raftKey, nonce) before any raft RPC is read.
type streamLayer struct {
	net.Listener
	advertise net.Addr
	auth      *Auth
	timeout   time.Duration          // handshake deadline
	blocked   func(addr string) bool // test partitions (nil: none)
}

func (s *streamLayer) Addr() net.Addr {
	if s.advertise != nil {
		return s.advertise
	}
	return s.Listener.Addr()
}

func (s *streamLayer) Accept() (net.Conn, error) {
	for {
		c, err := s.Listener.Accept()
		if err != nil || s.auth == nil {
			return c, err
		}
		if err := s.serverHandshake(c); err != nil {
			c.Close()
			continue
		}
		return c, nil
	}
}

func (s *streamLayer) serverHandshake(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(s.timeout))
	defer c.SetDeadline(time.Time{})
	nonce := make([]byte, nonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	if _, err := c.Write(nonce); err != nil {
		return err
	}
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	ok := false
	for _, k := range s.auth.raftKeys {
		m := hmac.New(sha256.New, k)
		m.Write(nonce)
		ok = hmac.Equal(got, m.Sum(nil)) || ok
	}
	if !ok {
		return errHandshake
	}
	return nil
}

func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := dialFiltered(context.Background(), string(addr), timeout, s.blocked)
	if err != nil || s.auth == nil {
		return c, err
	}
	_ = c.SetDeadline(time.Now().Add(s.timeout))
	nonce := make([]byte, nonceSize)
	if _, err := io.ReadFull(c, nonce); err != nil {
		c.Close()
		return nil, errors.Join(errHandshake, err)
	}
	m := hmac.New(sha256.New, s.auth.raftKey)
	m.Write(nonce)
	if _, err := c.Write(m.Sum(nil)); err != nil {
		c.Close()
		return nil, errors.Join(errHandshake, err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

var errPartitioned = errors.New("cluster: partitioned (test)")

// dialFiltered dials addr; with a blocked hook, the connection fails as
// soon as addr becomes blocked.
func dialFiltered(ctx context.Context, addr string, timeout time.Duration, blocked func(string) bool) (net.Conn, error) {
	if blocked != nil && blocked(addr) {
		return nil, errPartitioned
	}
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || blocked == nil {
		return c, err
	}
	return &filteredConn{Conn: c, addr: addr, blocked: blocked}, nil
}

type filteredConn struct {
	net.Conn
	addr    string
	blocked func(string) bool
}

func (c *filteredConn) Read(p []byte) (int, error) {
	for {
		if c.blocked(c.addr) {
			c.Conn.Close()
			return 0, errPartitioned
		}
		// Short read deadlines so that a block is noticed by an idle reader.
		_ = c.Conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		n, err := c.Conn.Read(p)
		var ne net.Error
		if n == 0 && errors.As(err, &ne) && ne.Timeout() {
			continue
		}
		return n, err
	}
}

func (c *filteredConn) Write(p []byte) (int, error) {
	if c.blocked(c.addr) {
		c.Conn.Close()
		return 0, errPartitioned
	}
	return c.Conn.Write(p)
}
