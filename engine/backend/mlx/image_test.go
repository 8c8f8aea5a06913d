//go:build cgo

package mlx

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"fusion/engine/backend"
	"fusion/engine/backend/backendtest"
	"fusion/engine/tensor"
)

// testImageOps checks Conv2D (PyTorch's weight layout converted by
// backend.ConvData), GroupNorm and Upsample2x against their formulas in
// float64 (the ones the CPU backend's test uses), in float32, on odd
// sizes: kernels 1 and 3, with and without padding, one and several
// groups.
func testImageOps(t *testing.T) {
	be, err := New(Options{Float32: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	rng := rand.New(rand.NewPCG(25, 27))
	upload := func(v []float32, shape ...int64) tensor.Tensor {
		return tensor.Tensor{DType: tensor.F32, Shape: shape, Data: f32Bytes(v)}
	}
	for _, c := range backendtest.ImageCases {
		t.Run(fmt.Sprintf("%dx%dx%d-k%d-p%d-g%d", c.H, c.W, c.C, c.Kernel, c.Pad, c.Groups), func(t *testing.T) {
			n := c.H * c.W
			x := randFloats(rng, n*c.C, 3)
			for i := range x {
				x[i] += 5 // a mean the norm must remove
			}
			cw, cb := randFloats(rng, c.Out*c.C*c.Kernel*c.Kernel, 1), randFloats(rng, c.Out, 1)
			bt := upload(cb, int64(c.Out))
			wd, err := backend.ConvData("conv", upload(cw, int64(c.Out), int64(c.C), int64(c.Kernel), int64(c.Kernel)), &bt)
			if err != nil {
				t.Fatal(err)
			}
			weight, err := be.Weight(wd)
			if err != nil {
				t.Fatal(err)
			}
			gw, gb := randFloats(rng, c.C, 1), randFloats(rng, c.C, 1)
			gwv, err := be.Vector(backend.VectorData{Name: "w", Data: upload(gw, int64(c.C))})
			if err != nil {
				t.Fatal(err)
			}
			gbv, err := be.Vector(backend.VectorData{Name: "b", Data: upload(gb, int64(c.C))})
			if err != nil {
				t.Fatal(err)
			}
			s := be.NewStep(context.Background())
			defer s.Close()
			xa := s.Input(n, c.C, x)
			for _, op := range []struct {
				name string
				y    backend.Array
				want []float64
				tol  float64
			}{
				{"Conv2D", s.Conv2D(xa, weight, c.H, c.W, c.Kernel, c.Pad), backendtest.Conv2D(x, c.H, c.W, c.C, cw, cb, c.Out, c.Kernel, c.Pad), 1e-5},
				{"GroupNorm", s.GroupNorm(xa, c.Groups, gwv, gbv, 1e-6), backendtest.GroupNorm(x, n, c.C, c.Groups, gw, gb, 1e-6), 1e-5},
				{"Upsample2x", s.Upsample2x(xa, c.H, c.W), backendtest.Upsample2x(x, c.H, c.W, c.C), 0},
			} {
				got, err := s.Read(op.y)
				if err != nil {
					t.Fatal(err)
				}
				d, err := within(op.name, got, op.want, nil, op.tol)
				t.Logf("%s: max |MLX − formula| %.3g", op.name, d)
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
}
