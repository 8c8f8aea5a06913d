package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"fusion/engine/tensor"
)

// An mxfp4/mxfp8/nvfp4 product is x·Wᵀ with W = code·scale per element
// (tensor.FPFormat's decoding, checked bit-exact against MLX in package
// modelfile), over random codes and moderate scales; DequantizeRow gives
// W's rows exactly.
func TestMLXFloat(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const rows, cols, batch = 9, 96, 6
	for _, mode := range []string{"mxfp4", "mxfp8", "nvfp4"} {
		t.Run(mode, func(t *testing.T) {
			f, _ := tensor.FP(mode)
			packed := make([]byte, rows*cols*f.Bits/8)
			for i := range packed {
				packed[i] = byte(rng.IntN(256))
				if f.Bits == 8 && packed[i]&0x7f == 0x7f {
					packed[i] = 0x38 // not NaN
				}
			}
			scales := make([]byte, rows*cols/f.Group)
			for i := range scales {
				if mode == "nvfp4" {
					scales[i] = byte(0x20 + rng.IntN(0x30)) // E4M3 0.03 … 4
				} else {
					scales[i] = byte(120 + rng.IntN(10)) // 2^−7 … 2^2
				}
			}
			w, err := NewMLXFloat(mode, rows, cols, packed, scales)
			if err != nil {
				t.Fatal(err)
			}
			if w.Bytes() != len(packed)+len(scales) {
				t.Errorf("Bytes = %d", w.Bytes())
			}
			dense := make([]float64, rows*cols)
			for i := range dense {
				dense[i] = float64(f.Code(f.CodeAt(packed, i))) * float64(f.Scale(scales[i/f.Group]))
			}
			row := make([]float32, cols)
			for r := range rows {
				DequantizeRow(row, w, r)
				for c, v := range row {
					if float64(v) != dense[r*cols+c] {
						t.Fatalf("row %d col %d: %v, want %v", r, c, v, dense[r*cols+c])
					}
				}
			}
			x := make([]float32, batch*cols)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			got := make([]float32, batch*rows)
			MatMul(got, x, batch, w)
			for b := range batch {
				for r := range rows {
					var want, mag float64
					for c := range cols {
						p := float64(x[b*cols+c]) * dense[r*cols+c]
						want += p
						mag += math.Abs(p)
					}
					if d := math.Abs(float64(got[b*rows+r]) - want); d > 1e-5*max(1, mag) {
						t.Fatalf("batch %d row %d: %v, want %v", b, r, got[b*rows+r], want)
					}
				}
			}
		})
	}
	if _, err := NewMLXFloat("mxfp4", 2, 48, make([]byte, 48), make([]byte, 3)); err == nil {
		t.Error("48 columns (not whole groups of 32) accepted")
	}
	if _, err := NewMLXFloat("mxint4", 2, 32, make([]byte, 32), make([]byte, 2)); err == nil {
		t.Error("unknown mode accepted")
	}
	if _, err := NewMLXFloat("mxfp8", 2, 32, make([]byte, 32), make([]byte, 2)); err == nil {
		t.Error("short codes accepted")
	}
}
