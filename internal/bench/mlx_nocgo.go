//go:build !cgo

package bench

import "context"

// runFusionMLX cannot run without cgo: the MLX binding is cgo.
func runFusionMLX(ctx context.Context, path string, prompt []int, decode, repeat int) (mlxSpeed, map[string]any) {
	return mlxSpeed{Error: "built without cgo (CGO_ENABLED=0): MLX unavailable"}, nil
}
