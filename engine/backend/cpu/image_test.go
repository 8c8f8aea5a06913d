package cpu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"fusion/engine/backend"
	"fusion/engine/backend/backendtest"
)

// TestImageOps compares Conv2D (with PyTorch's weight layout converted by
// backend.ConvWeight), GroupNorm and Upsample2x with their formulas in
// float64 on odd sizes: kernels 1 and 3, with and without padding, one
// image of more pixels than a Conv2D chunk, one group and several.
func TestImageOps(t *testing.T) {
	b := New(Options{Threads: 3})
	defer b.Close()
	rng := rand.New(rand.NewPCG(25, 26))
	cases := []struct{ h, w, c, out, kernel, pad, groups int }{
		{5, 7, 6, 5, 3, 1, 3},
		{3, 4, 4, 3, 1, 0, 2},
		{1, 1, 2, 3, 3, 1, 1},
		{6, 5, 3, 2, 3, 0, 1},
		{13, 11, 8, 4, 3, 1, 4}, // 143 pixels: two chunks of im2col rows
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%dx%dx%d-k%d-p%d-g%d", c.h, c.w, c.c, c.kernel, c.pad, c.groups), func(t *testing.T) {
			n := c.h * c.w
			x := randFloats(rng, n*c.c)
			for i := range x {
				x[i] = x[i]*3 + 5 // a mean and spread the norm must remove
			}
			cw, cb := randFloats(rng, c.out*c.c*c.kernel*c.kernel), randFloats(rng, c.out)
			wt, bt := f32Tensor(cw), f32Tensor(cb)
			wt.Shape = []int64{int64(c.out), int64(c.c), int64(c.kernel), int64(c.kernel)}
			wd, err := backend.ConvWeight("conv", wt, &bt)
			if err != nil {
				t.Fatal(err)
			}
			weight, err := b.Weight(wd)
			if err != nil {
				t.Fatal(err)
			}
			gw, gb := randFloats(rng, c.c), randFloats(rng, c.c)
			gwv, err := b.Vector(backend.VectorData{Name: "w", Data: f32Tensor(gw)})
			if err != nil {
				t.Fatal(err)
			}
			gbv, err := b.Vector(backend.VectorData{Name: "b", Data: f32Tensor(gb)})
			if err != nil {
				t.Fatal(err)
			}
			s := b.NewStep(context.Background())
			defer s.Close()
			xa := s.Input(n, c.c, x)
			y := s.Conv2D(xa, weight, c.h, c.w, c.kernel, c.pad)
			oh, ow := c.h+2*c.pad-c.kernel+1, c.w+2*c.pad-c.kernel+1
			if y.Rows() != oh*ow || y.Cols() != c.out {
				t.Fatalf("Conv2D: [%d, %d], want [%d, %d]", y.Rows(), y.Cols(), oh*ow, c.out)
			}
			closeTo(t, "Conv2D", read(t, s, y), backendtest.Conv2D(x, c.h, c.w, c.c, cw, cb, c.out, c.kernel, c.pad), 1e-5)
			closeTo(t, "GroupNorm", read(t, s, s.GroupNorm(xa, c.groups, gwv, gbv, 1e-6)),
				backendtest.GroupNorm(x, n, c.c, c.groups, gw, gb, 1e-6), 1e-5)
			closeTo(t, "Upsample2x", read(t, s, s.Upsample2x(xa, c.h, c.w)), backendtest.Upsample2x(x, c.h, c.w, c.c), 0)
		})
	}
}

// TestImageShapes checks that the image ops refuse arguments that do not
// fit (a bug of the model code: a panic naming the op).
func TestImageShapes(t *testing.T) {
	b := New(Options{Threads: 1})
	defer b.Close()
	wt := f32Tensor(make([]float32, 2*3*9))
	wt.Shape = []int64{2, 3, 3, 3}
	wd, err := backend.ConvWeight("conv", wt, nil)
	if err != nil {
		t.Fatal(err)
	}
	weight, err := b.Weight(wd)
	if err != nil {
		t.Fatal(err)
	}
	vec, err := b.Vector(backend.VectorData{Name: "v", Data: f32Tensor(make([]float32, 3))})
	if err != nil {
		t.Fatal(err)
	}
	s := b.NewStep(context.Background())
	defer s.Close()
	x := s.Input(6, 3, make([]float32, 18))
	for name, fn := range map[string]func(){
		"Conv2D rows":      func() { s.Conv2D(x, weight, 2, 2, 3, 1) },
		"Conv2D channels":  func() { s.Conv2D(s.Input(4, 2, make([]float32, 8)), weight, 2, 2, 3, 1) },
		"Conv2D pad":       func() { s.Conv2D(x, weight, 2, 3, 3, 3) },
		"Conv2D too small": func() { s.Conv2D(x, weight, 2, 3, 3, 0) },
		"GroupNorm groups": func() { s.GroupNorm(x, 2, vec, vec, 1e-6) },
		"Upsample2x rows":  func() { s.Upsample2x(x, 3, 3) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			fn()
		}()
	}
	for _, bad := range []struct {
		shape []int64
		n     int
	}{{[]int64{2, 3}, 6}, {[]int64{2, 3, 3, 3}, 50}} {
		w := f32Tensor(make([]float32, bad.n))
		w.Shape = bad.shape
		if _, err := backend.ConvWeight("bad", w, nil); err == nil {
			t.Errorf("ConvWeight accepted %v with %d values", bad.shape, bad.n)
		}
	}
}
