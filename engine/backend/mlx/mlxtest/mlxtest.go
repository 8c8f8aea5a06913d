//go:build cgo

// Package mlxtest helps tests put the MLX backend in real trouble: a
// backend whose steps fail with a genuine MLX error once told to.
package mlxtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"fusion/engine/backend"
	"fusion/engine/backend/mlx"
)

// Faulty is an MLX backend whose steps fail, while armed, at their first
// Read: the step asks MLX, on its own thread, for an op MLX refuses (a
// reshape of 6 values into [4, 4]), so the error is MLX's, through the
// binding's error handler, as an *mlx.Error.
type Faulty struct {
	*mlx.Backend
	mu     sync.Mutex
	skip   int // steps to let through before failing
	fail   int // steps still to fail
	Failed atomic.Int64
}

// Wrap returns be (an *mlx.Backend) as a Faulty backend, disarmed.
func Wrap(be backend.Backend) *Faulty {
	m, ok := be.(*mlx.Backend)
	if !ok {
		panic(fmt.Sprintf("mlxtest: %T is not the MLX backend", be))
	}
	return &Faulty{Backend: m}
}

// FailSteps lets the next skip steps through and makes the n after them
// fail (skip 0 fails a generation's prefill, more a decode step).
func (f *Faulty) FailSteps(skip, n int) {
	f.mu.Lock()
	f.skip, f.fail = skip, n
	f.mu.Unlock()
}

// failNext reports whether the step reading now must fail.
func (f *Faulty) failNext() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.skip > 0 {
		f.skip--
		return false
	}
	if f.fail > 0 {
		f.fail--
		return true
	}
	return false
}

// NewStep starts a step that fails while the backend is armed.
func (f *Faulty) NewStep(ctx context.Context) backend.Step {
	return &faultyStep{Step: f.Backend.NewStep(ctx), f: f}
}

type faultyStep struct {
	backend.Step
	f *Faulty
}

func (s *faultyStep) Read(x backend.Array) ([]float32, error) {
	if s.f.failNext() {
		s.f.Failed.Add(1)
		return nil, s.f.mlxError()
	}
	return s.Step.Read(x)
}

// mlxError runs the refused op on the backend's MLX thread.
func (f *Faulty) mlxError() error {
	rt := f.Runtime()
	err := rt.Do(context.Background(), func() error {
		a := rt.NewArena()
		defer a.Free()
		a.Reshape(a.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 6), 4, 4)
		return a.Err()
	})
	if err == nil {
		return fmt.Errorf("mlxtest: MLX accepted a reshape of 6 values into [4, 4]")
	}
	return err
}
