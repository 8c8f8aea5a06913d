//go:build !cgo

package mlx

import "errors"

// errNoCgo is why MLX is unavailable in a CGO_ENABLED=0 build: the binding
// is cgo over dlopen.
var errNoCgo = errors.New("mlx: built without cgo (CGO_ENABLED=0): MLX unavailable")

// Available reports why MLX cannot be used: in this build, always.
func Available() error { return errNoCgo }

// Library is empty in a build without cgo.
func Library() (path, version string) { return "", "" }

// Runtime is the MLX thread; a build without cgo cannot open one.
type Runtime struct{}

// Open fails: the build has no cgo.
func Open() (*Runtime, error) { return nil, errNoCgo }

// Close does nothing.
func (r *Runtime) Close() error { return nil }
