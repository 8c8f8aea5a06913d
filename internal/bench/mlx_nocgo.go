//go:build !cgo

package bench

import (
	"context"
	"errors"

	"fusion/engine/backend"
)

// runFusionMLX cannot run without cgo: the MLX binding is cgo.
func runFusionMLX(ctx context.Context, path string, prompt []int, decode, repeat int) (mlxSpeed, map[string]any) {
	return mlxSpeed{Error: "built without cgo (CGO_ENABLED=0): MLX unavailable"}, nil
}

// newMLXBackend cannot run without cgo.
func newMLXBackend() (backend.Backend, error) {
	return nil, errors.New("built without cgo (CGO_ENABLED=0): MLX unavailable")
}
