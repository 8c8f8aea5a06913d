//go:build cgo

package mlx

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"fusion/engine/backend/cpu/kernels"
	"fusion/engine/tensor"
)

// testGGUFAffine: Q8_0 and Q4_0 matrices mapped to MLX affine codes
// dequantize (mlx.dequantize, float32) to exactly the CPU kernels'
// values, bit for bit (zeros up to their sign); a block with a non-finite scale is not mapped;
// other types are not mapped.
func testGGUFAffine(t *testing.T, rt *Runtime) {
	rng := rand.New(rand.NewPCG(8, 9))
	const out, in = 7, 160
	for _, c := range []struct {
		dt         tensor.DType
		blockBytes int
	}{{tensor.Q8_0, 34}, {tensor.Q4_0, 18}} {
		t.Run(c.dt.String(), func(t *testing.T) {
			data := make([]byte, out*in/32*c.blockBytes)
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			for b := 0; b < len(data); b += c.blockBytes {
				// Scales over f16's range, subnormals included.
				d := float32(math.Ldexp(rng.Float64()+0.5, rng.IntN(40)-30))
				binary.LittleEndian.PutUint16(data[b:], tensor.F32ToF16(d))
			}
			g, err := kernels.NewGGUF(c.dt, out, in, data)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]float32, out*in)
			for r := range out {
				kernels.DequantizeRow(want[r*in:(r+1)*in], g, r)
			}
			aff, ok := ggufAffine(c.dt, out, in, data)
			if !ok {
				t.Fatal("not mapped")
			}
			var got []float32
			on(t, rt, func(a *Arena) error {
				x := a.Dequantize(a.FromBytes(tensor.U32, aff.codes, out, in*aff.bits/32),
					a.FromBytes(tensor.F32, aff.scales, out, in/32), a.FromBytes(tensor.F32, aff.biases, out, in/32), 32, aff.bits, tensor.F32)
				var err error
				got, err = a.Float32(x)
				return err
			})
			for i := range want {
				// Bit for bit, but for the sign of a zero: a block whose
				// scale is 0 gives −0 for negative codes on the CPU
				// (0·q) and +0 here (0·code − 0).
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) && (got[i] != 0 || want[i] != 0) {
					t.Fatalf("element %d (row %d): MLX %g, CPU %g", i, i/in, got[i], want[i])
				}
			}
			binary.LittleEndian.PutUint16(data[c.blockBytes:], 0x7c00) // +Inf
			if _, ok := ggufAffine(c.dt, out, in, data); ok {
				t.Error("a block with an infinite scale was mapped")
			}
		})
	}
	if _, ok := ggufAffine(tensor.Q6_K, 1, 256, make([]byte, 210)); ok {
		t.Error("Q6_K was mapped (MLX has no group of 16)")
	}
}
