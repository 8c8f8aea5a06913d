//go:build !cgo

package runner

import (
	"fusion/engine/backend"
	"fusion/engine/backend/mlx"
)

// Without cgo there is no MLX: Available says why.

func openMLX(*MLXStatus, mlxLimits) (mlxRuntime, error) { return nil, mlx.Available() }

func newMLXBackend(mlxLimits) (backend.Backend, int, string, error) {
	return nil, 0, "", mlx.Available()
}

func mlxKVLayout() string { return "" }
