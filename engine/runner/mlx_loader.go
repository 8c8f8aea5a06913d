//go:build cgo

package runner

import (
	"context"
	"errors"

	"fusion/engine/backend"
	"fusion/engine/backend/mlx"
)

// The MLX side of the loader: the runner's own MLX thread (for the memory
// counters and limits) and a backend per model. Without cgo,
// mlx_nocgo.go says MLX is unavailable.

type mlxThread struct{ rt *mlx.Runtime }

func (t mlxThread) Memory(ctx context.Context) (MLXMemory, error) {
	m, err := t.rt.Memory(ctx)
	return MLXMemory{Active: m.Active, Peak: m.Peak, Cache: m.Cache}, err
}

func (t mlxThread) ResetPeak(ctx context.Context) error { return t.rt.ResetPeak(ctx) }

func (t mlxThread) Close() error { return t.rt.Close() }

// openMLX loads the library (once per process), starts a thread on it,
// applies the limits and fills st. It fails with the reason MLX cannot
// be used.
func openMLX(st *MLXStatus, limits mlxLimits) (mlxRuntime, error) {
	rt, err := mlx.Open()
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	if limits.memory > 0 {
		_, err = rt.SetMemoryLimit(ctx, limits.memory)
	}
	if limits.cache > 0 && err == nil {
		_, err = rt.SetCacheLimit(ctx, limits.cache)
	}
	if err != nil {
		return nil, errors.Join(err, rt.Close())
	}
	st.Available = true
	st.Library, st.Version = mlx.Library()
	st.Device = "cpu"
	if rt.GPU() {
		st.Device = "gpu"
	}
	st.MemoryLimit, st.CacheLimit = limits.memory, limits.cache
	return mlxThread{rt}, nil
}

// newMLXBackend makes an MLX backend (its own MLX thread) with the limits
// (process-wide in MLX; applied again, to the same values).
func newMLXBackend(limits mlxLimits) (backend.Backend, int, string, error) {
	be, err := mlx.New(mlx.Options{MemoryLimit: limits.memory, CacheLimit: limits.cache})
	if err != nil {
		return nil, 0, "", err
	}
	return be, mlx.KVStep, mlx.KVLayout, nil
}

func mlxKVLayout() string { return mlx.KVLayout }
