//go:build cgo

package flux2

import (
	"os"
	"testing"

	"fusion/engine/backend"
	"fusion/engine/backend/mlx"
)

// mlxBackend is MLX computing in float32, or nil (a skip line) when
// libmlxc does not load; FUSION_REQUIRE_MLX=1 makes that a failure.
func mlxBackend(t *testing.T) backend.Backend {
	if err := mlx.Available(); err != nil {
		if os.Getenv("FUSION_REQUIRE_MLX") == "1" {
			t.Fatalf("FUSION_REQUIRE_MLX=1 and MLX is unavailable: %v", err)
		}
		t.Logf("MLX unavailable, CPU only: %v", err)
		return nil
	}
	be, err := mlx.New(mlx.Options{Float32: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	return be
}
