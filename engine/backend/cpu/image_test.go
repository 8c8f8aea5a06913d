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
// backend.ConvData), GroupNorm and Upsample2x with their formulas in
// float64 on odd sizes: kernels 1 and 3, with and without padding, one
// image of more pixels than a Conv2D chunk, one group and several.
func TestImageOps(t *testing.T) {
	b := New(Options{Threads: 3})
	defer b.Close()
	rng := rand.New(rand.NewPCG(25, 26))
	for _, c := range backendtest.ImageCases {
		t.Run(fmt.Sprintf("%dx%dx%d-k%d-p%d-g%d", c.H, c.W, c.C, c.Kernel, c.Pad, c.Groups), func(t *testing.T) {
			n := c.H * c.W
			x := randFloats(rng, n*c.C)
			for i := range x {
				x[i] = x[i]*3 + 5 // a mean and spread the norm must remove
			}
			cw, cb := randFloats(rng, c.Out*c.C*c.Kernel*c.Kernel), randFloats(rng, c.Out)
			wt, bt := f32Tensor(cw), f32Tensor(cb)
			wt.Shape = []int64{int64(c.Out), int64(c.C), int64(c.Kernel), int64(c.Kernel)}
			wd, err := backend.ConvData("conv", wt, &bt)
			if err != nil {
				t.Fatal(err)
			}
			weight, err := b.Weight(wd)
			if err != nil {
				t.Fatal(err)
			}
			gw, gb := randFloats(rng, c.C), randFloats(rng, c.C)
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
			xa := s.Input(n, c.C, x)
			y := s.Conv2D(xa, weight, c.H, c.W, c.Kernel, c.Pad)
			oh, ow := c.H+2*c.Pad-c.Kernel+1, c.W+2*c.Pad-c.Kernel+1
			if y.Rows() != oh*ow || y.Cols() != c.Out {
				t.Fatalf("Conv2D: [%d, %d], want [%d, %d]", y.Rows(), y.Cols(), oh*ow, c.Out)
			}
			closeTo(t, "Conv2D", read(t, s, y), backendtest.Conv2D(x, c.H, c.W, c.C, cw, cb, c.Out, c.Kernel, c.Pad), 1e-5)
			closeTo(t, "GroupNorm", read(t, s, s.GroupNorm(xa, c.Groups, gwv, gbv, 1e-6)),
				backendtest.GroupNorm(x, n, c.C, c.Groups, gw, gb, 1e-6), 1e-5)
			closeTo(t, "Upsample2x", read(t, s, s.Upsample2x(xa, c.H, c.W)), backendtest.Upsample2x(x, c.H, c.W, c.C), 0)
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
	wd, err := backend.ConvData("conv", wt, nil)
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
		if _, err := backend.ConvData("bad", w, nil); err == nil {
			t.Errorf("ConvData accepted %v with %d values", bad.shape, bad.n)
		}
	}
}

// BenchmarkConv2D is a 3×3 convolution of a 64×64 image of 128 channels
// to 128 (one of a VAE decoder's mid-resolution layers), and the Linear
// of the same product on an input already gathered: the FLOP rates show
// what im2col costs.
func BenchmarkConv2D(b *testing.B) {
	be := New(Options{})
	defer be.Close()
	const h, w, c, out = 64, 64, 128, 128
	rng := rand.New(rand.NewPCG(1, 1))
	wt := f32Tensor(randFloats(rng, out*c*9))
	wt.Shape = []int64{out, c, 3, 3}
	wd, err := backend.ConvData("conv", wt, nil)
	if err != nil {
		b.Fatal(err)
	}
	weight, err := be.Weight(wd)
	if err != nil {
		b.Fatal(err)
	}
	x := randFloats(rng, h*w*c)
	wide := randFloats(rng, h*w*c*9)
	flops := float64(2 * h * w * out * 9 * c)
	for _, run := range []struct {
		name string
		op   func(s backend.Step)
	}{
		{"conv", func(s backend.Step) { s.Conv2D(s.Input(h*w, c, x), weight, h, w, 3, 1) }},
		{"linear", func(s backend.Step) { s.Linear(s.Input(h*w, 9*c, wide), weight) }},
	} {
		b.Run(run.name, func(b *testing.B) {
			for range b.N {
				s := be.NewStep(context.Background())
				run.op(s)
				s.Close()
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
