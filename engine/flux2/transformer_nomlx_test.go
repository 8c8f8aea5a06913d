//go:build !cgo

package flux2

import (
	"testing"

	"fusion/engine/backend"
)

// mlxBackend is nil: MLX needs cgo.
func mlxBackend(t *testing.T) backend.Backend { return nil }
