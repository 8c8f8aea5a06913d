package cpu

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
)

// TestFluxOps checks FLUX's ops (ConcatRows, SiLU, Modulate, Gate,
// RoPETable) against their formulas in float64, on odd sizes.
func TestFluxOps(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	rng := rand.New(rand.NewPCG(25, 2))
	for _, sz := range []struct{ rows, heads, d int }{{1, 1, 2}, {7, 3, 6}, {33, 5, 10}} {
		rows, cols := sz.rows, sz.heads*sz.d
		x, y := randFloats(rng, rows*cols), randFloats(rng, rows*cols)
		for i := range x {
			x[i] = x[i]*3 + 5 // a mean and spread the norm must remove
		}
		shift, scale, g := randFloats(rng, cols), randFloats(rng, cols), randFloats(rng, cols)
		cos, sin := randFloats(rng, rows*sz.d), randFloats(rng, rows*sz.d)
		const eps = 1e-6

		silu := make([]float64, len(x))
		concat := make([]float64, 0, 2*len(x))
		mod := make([]float64, len(x))
		gate := make([]float64, len(x))
		rope := make([]float64, len(x))
		for i, v := range x {
			silu[i] = float64(v) / (1 + math.Exp(-float64(v)))
			concat = append(concat, float64(v))
			gate[i] = float64(y[i]) + float64(g[i%cols])*float64(v)
		}
		for _, v := range y {
			concat = append(concat, float64(v))
		}
		for r := range rows {
			row := x[r*cols : (r+1)*cols]
			var mean, sq float64
			for _, v := range row {
				mean += float64(v)
			}
			mean /= float64(cols)
			for _, v := range row {
				sq += (float64(v) - mean) * (float64(v) - mean)
			}
			inv := 1 / math.Sqrt(sq/float64(cols)+eps)
			for i, v := range row {
				mod[r*cols+i] = (float64(v)-mean)*inv*(1+float64(scale[i])) + float64(shift[i])
			}
			for h := 0; h < cols; h += sz.d {
				for i := 0; i < sz.d; i += 2 {
					x0, x1 := float64(row[h+i]), float64(row[h+i+1])
					c0, s0 := float64(cos[r*sz.d+i]), float64(sin[r*sz.d+i])
					c1, s1 := float64(cos[r*sz.d+i+1]), float64(sin[r*sz.d+i+1])
					rope[r*cols+h+i] = x0*c0 - x1*s0
					rope[r*cols+h+i+1] = x1*c1 + x0*s1
				}
			}
		}

		s := b.NewStep(context.Background())
		xa, ya := s.Input(rows, cols, x), s.Input(rows, cols, y)
		closeTo(t, "ConcatRows", read(t, s, s.ConcatRows(xa, ya)), concat, 0)
		closeTo(t, "SiLU", read(t, s, s.SiLU(xa)), silu, 1e-6)
		closeTo(t, "Modulate", read(t, s, s.Modulate(xa, s.Input(1, cols, shift), s.Input(1, cols, scale), eps)), mod, 1e-5)
		closeTo(t, "Gate", read(t, s, s.Gate(ya, xa, s.Input(1, cols, g))), gate, 1e-6)
		closeTo(t, "RoPETable", read(t, s, s.RoPETable(xa, s.Input(rows, sz.d, cos), s.Input(rows, sz.d, sin))), rope, 1e-6)
		s.Close()
	}
}
