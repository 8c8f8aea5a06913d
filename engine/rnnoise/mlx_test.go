//go:build cgo

package rnnoise

import (
	"testing"

	"fusion/engine/backend/mlx"
	"fusion/internal/testenv"
)

// TestOnMLX runs the network on the MLX backend (MLX's CPU device here,
// Metal on a Mac) in float32 mode, with the CPU backend's tolerances (the
// signal processing around it is the host's, TestDenoiseMatchesReference's).
func TestOnMLX(t *testing.T) {
	testenv.NeedMLX(t, mlx.Available())
	be, err := mlx.New(mlx.Options{Float32: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	networkMatches(t, be)
}
