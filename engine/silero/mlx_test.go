//go:build cgo

package silero

import (
	"testing"

	"fusion/engine/backend/mlx"
	"fusion/internal/testenv"
)

// TestProbsOnMLX runs the model on the MLX backend (MLX's CPU device
// here, Metal on a Mac) in float32 mode against onnxruntime, as
// TestProbsMatchOnnxruntime does on the CPU backend.
func TestProbsOnMLX(t *testing.T) {
	testenv.NeedMLX(t, mlx.Available())
	be, err := mlx.New(mlx.Options{Float32: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	probsMatch(t, be)
}
