package router

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Server is the HTTP server of a node: it listens at once (so the address
// is known, even for port 0), serves in the background and drains on
// request.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
	log  *slog.Logger

	started bool
	tls     bool
}

// Listen binds addr and returns a server for h that is not serving yet.
func Listen(addr string, h http.Handler, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// No WriteTimeout: a streamed generation may run for minutes.
	}
	if rt, ok := h.(*Router); ok {
		srv.RegisterOnShutdown(rt.shutdown)
	}
	return &Server{srv: srv, ln: ln, done: make(chan error, 1), log: log}, nil
}

// SetHandler sets the handler of a server bound by Listen with a nil
// handler, so the address is known before the handler is built (a
// cluster member advertises it, and the router's session store is built
// over the member). Call it before Serve.
func (s *Server) SetHandler(h http.Handler) {
	s.srv.Handler = h
	if rt, ok := h.(*Router); ok {
		s.srv.RegisterOnShutdown(rt.shutdown)
	}
}

// SetTLS makes the server speak HTTPS with cfg (its GetCertificate or
// Certificates), HTTP/2 and HTTP/1.1 negotiated by ALPN. Call it before
// Serve.
func (s *Server) SetTLS(cfg *tls.Config) {
	s.srv.TLSConfig = cfg
	s.tls = cfg != nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve starts serving in the background. Call it once, before Drain.
func (s *Server) Serve() {
	s.started = true
	go func() {
		var err error
		if s.tls {
			// The certificate comes from TLSConfig; ServeTLS adds "h2"
			// to its protocols.
			err = s.srv.ServeTLS(s.ln, "", "")
		} else {
			err = s.srv.Serve(s.ln)
		}
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
}

// Drain stops accepting connections and waits for the requests in flight
// to finish until ctx is done; then it closes the connections still open,
// which cancels their requests. It returns once the server has stopped.
func (s *Server) Drain(ctx context.Context) error {
	if !s.started {
		return s.ln.Close()
	}
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.log.Warn("drain deadline reached; closing the connections still open", "err", err)
		err = s.srv.Close()
	}
	if serr := <-s.done; serr != nil {
		return errors.Join(err, serr)
	}
	return err
}
