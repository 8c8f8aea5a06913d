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
// backend.ConvWeight), GroupNorm and Upsample2x against their formulas in
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
	cases := []struct{ h, w, c, out, kernel, pad, groups int }{
		{5, 7, 6, 5, 3, 1, 3},
		{3, 4, 4, 3, 1, 0, 2},
		{1, 1, 2, 3, 3, 1, 1},
		{6, 5, 3, 2, 3, 0, 1},
		{13, 11, 8, 4, 3, 1, 4},
	}
	upload := func(v []float32, shape ...int64) tensor.Tensor {
		return tensor.Tensor{DType: tensor.F32, Shape: shape, Data: f32Bytes(v)}
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%dx%dx%d-k%d-p%d-g%d", c.h, c.w, c.c, c.kernel, c.pad, c.groups), func(t *testing.T) {
			n := c.h * c.w
			x := randFloats(rng, n*c.c, 3)
			for i := range x {
				x[i] += 5 // a mean the norm must remove
			}
			cw, cb := randFloats(rng, c.out*c.c*c.kernel*c.kernel, 1), randFloats(rng, c.out, 1)
			bt := upload(cb, int64(c.out))
			wd, err := backend.ConvWeight("conv", upload(cw, int64(c.out), int64(c.c), int64(c.kernel), int64(c.kernel)), &bt)
			if err != nil {
				t.Fatal(err)
			}
			weight, err := be.Weight(wd)
			if err != nil {
				t.Fatal(err)
			}
			gw, gb := randFloats(rng, c.c, 1), randFloats(rng, c.c, 1)
			gwv, err := be.Vector(backend.VectorData{Name: "w", Data: upload(gw, int64(c.c))})
			if err != nil {
				t.Fatal(err)
			}
			gbv, err := be.Vector(backend.VectorData{Name: "b", Data: upload(gb, int64(c.c))})
			if err != nil {
				t.Fatal(err)
			}
			s := be.NewStep(context.Background())
			defer s.Close()
			xa := s.Input(n, c.c, x)
			for _, op := range []struct {
				name string
				y    backend.Array
				want []float64
				tol  float64
			}{
				{"Conv2D", s.Conv2D(xa, weight, c.h, c.w, c.kernel, c.pad), backendtest.Conv2D(x, c.h, c.w, c.c, cw, cb, c.out, c.kernel, c.pad), 1e-5},
				{"GroupNorm", s.GroupNorm(xa, c.groups, gwv, gbv, 1e-6), backendtest.GroupNorm(x, n, c.c, c.groups, gw, gb, 1e-6), 1e-5},
				{"Upsample2x", s.Upsample2x(xa, c.h, c.w), backendtest.Upsample2x(x, c.h, c.w, c.c), 0},
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
