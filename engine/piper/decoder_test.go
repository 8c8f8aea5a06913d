package piper

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu"
	"fusion/engine/tensor"
)

// TestDilatedByPhases: a same-padded dilated convolution run as one
// Conv1D over its input's phases gives the sums of one Linear per tap
// over shifted rows (the plain way, and what onnxruntime computes),
// including inputs shorter than the dilation and lengths that are not a
// multiple of it.
func TestDilatedByPhases(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for _, tc := range []struct{ n, kernel, dilation int }{
		{1, 3, 3}, {2, 3, 5}, {7, 3, 3}, {20, 5, 3}, {33, 7, 5}, {10, 11, 5}, {64, 3, 2},
	} {
		t.Run(fmt.Sprintf("n%d_k%d_d%d", tc.n, tc.kernel, tc.dilation), func(t *testing.T) {
			const in, out = 4, 3
			r := rand.New(rand.NewPCG(uint64(tc.n), uint64(tc.kernel)))
			randn := func(n int) []float32 {
				x := make([]float32, n)
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
				return x
			}
			w := tensor.Tensor{DType: tensor.F32, Shape: []int64{out, in, int64(tc.kernel)}, Data: tensor.Encode(tensor.F32, randn(out*in*tc.kernel))}
			bias := tensor.Tensor{DType: tensor.F32, Shape: []int64{out}, Data: tensor.Encode(tensor.F32, randn(out))}
			c := &conv1d{name: "c", in: in, out: out, kernel: tc.kernel, dilation: tc.dilation, pad: tc.dilation * (tc.kernel - 1) / 2, stride: 1}
			if !c.samePhases() {
				t.Fatal("not a same-padded dilated convolution")
			}
			wd, err := backend.ConvData("c", w, &bias)
			if err != nil {
				t.Fatal(err)
			}
			if c.whole, err = be.Weight(wd); err != nil {
				t.Fatal(err)
			}
			src, _ := tensor.Floats(w)
			plain := &conv1d{name: "c", in: in, out: out, kernel: tc.kernel, dilation: tc.dilation, pad: c.pad, stride: 1}
			for _, d := range plain.tapData(src, &bias) {
				wt, err := be.Weight(d)
				if err != nil {
					t.Fatal(err)
				}
				plain.taps = append(plain.taps, wt)
			}
			x := randn(tc.n * in)
			s := be.NewStep(context.Background())
			defer s.Close()
			got, err := s.Read(c.run(s, s.Input(tc.n, in, x)))
			if err != nil {
				t.Fatal(err)
			}
			want, err := s.Read(plain.run(s, s.Input(tc.n, in, x)))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.n*out || len(want) != len(got) {
				t.Fatalf("%d and %d values, want %d", len(got), len(want), tc.n*out)
			}
			var worst float64
			for i := range got {
				worst = max(worst, math.Abs(float64(got[i]-want[i])))
			}
			if worst > 1e-5 {
				t.Errorf("phases and taps differ by up to %.3g", worst)
			}
		})
	}
}
