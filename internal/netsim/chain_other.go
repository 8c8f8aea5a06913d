//go:build !linux

package netsim

import (
	"context"
	"fmt"
	"net"
	"runtime"
)

// Chain is unavailable off Linux: NewChain always fails.
type Chain struct {
	DelayMethod, BandwidthMethod string
}

// Available says why network namespaces cannot be made here.
func Available() error { return fmt.Errorf("%w: %s is not Linux", ErrUnavailable, runtime.GOOS) }

// NewChain fails off Linux.
func NewChain(context.Context, int, Link) (*Chain, error) { return nil, Available() }

func (c *Chain) Nodes() int                                    { return 0 }
func (c *Chain) Namespace(int) string                          { return "" }
func (c *Chain) Addr(int) string                               { return "" }
func (c *Chain) Do(int, func() error) error                    { return Available() }
func (c *Chain) Listen(int, string) (net.Listener, error)      { return nil, Available() }
func (c *Chain) Dialer(int) DialFunc                           { return nil }
func (c *Chain) Via(int, string) (string, error)               { return "", Available() }
func (c *Chain) SentBytes(context.Context, int) (int64, error) { return 0, Available() }
func (c *Chain) Close() error                                  { return nil }
