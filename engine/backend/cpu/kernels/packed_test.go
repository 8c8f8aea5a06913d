package kernels

import (
	"fmt"
	"math"
	"testing"

	"fusion/engine/tensor"
)

// TestMulPacked checks every level's MulPacked against the float64
// product, over shapes around the 4-row and 4-panel tiles (a partial last
// panel, rows left over), strided activations and outputs, matrices
// packed from rows (PackRows) and from a transpose (PackCols), and that
// every output row is the same bits as the row multiplied alone.
func TestMulPacked(t *testing.T) {
	r := newRand(t)
	shapes := []struct{ m, rows, cols int }{
		{1, 1, 1}, {1, 16, 3}, {2, 17, 5}, {3, 63, 16}, {4, 64, 33}, {5, 65, 7},
		{7, 100, 32}, {8, 128, 384}, {9, 130, 31}, {13, 384, 40}, {17, 20, 1},
	}
	for _, l := range Levels() {
		k, _ := ForLevel(l)
		for _, s := range shapes {
			for _, transposed := range []bool{false, true} {
				name := fmt.Sprintf("%v/m%d/%dx%d/transposed=%v", l, s.m, s.rows, s.cols, transposed)
				ldx, ldd, ldw := s.cols+3, s.rows+5, 0
				x := randFloats(r, (s.m-1)*ldx+s.cols)
				p := make([]float32, PackedLen(s.rows, s.cols))
				w := make([]float64, s.rows*s.cols) // w[o·cols+c]
				if transposed {
					ldw = s.rows + 2
					src := randFloats(r, (s.cols-1)*ldw+s.rows)
					PackCols(p, src, ldw, s.rows, s.cols)
					for o := range s.rows {
						for c := range s.cols {
							w[o*s.cols+c] = float64(src[c*ldw+o])
						}
					}
				} else {
					ldw = s.cols + 1
					src := randFloats(r, (s.rows-1)*ldw+s.cols)
					PackRows(p, src, ldw, s.rows, s.cols)
					for o := range s.rows {
						for c := range s.cols {
							w[o*s.cols+c] = float64(src[o*ldw+c])
						}
					}
				}
				dst := make([]float32, (s.m-1)*ldd+s.rows)
				for i := range dst {
					dst[i] = float32(math.NaN()) // the gaps must stay untouched
				}
				k.MulPacked(dst, ldd, x, ldx, s.m, p, s.rows, s.cols)
				one := make([]float32, s.rows)
				for b := range s.m {
					k.MulPacked(one, s.rows, x[b*ldx:], ldx, 1, p, s.rows, s.cols)
					for o := range s.rows {
						var want, mag float64
						for c := range s.cols {
							xv := float64(x[b*ldx+c])
							want += xv * w[o*s.cols+c]
							mag += math.Abs(xv * w[o*s.cols+c])
						}
						got := dst[b*ldd+o]
						if d := math.Abs(float64(got) - want); !(d <= tolRef*mag) {
							t.Fatalf("%s b=%d o=%d: got %v want %v", name, b, o, got, want)
						}
						if got != one[o] {
							t.Fatalf("%s b=%d o=%d: batched %v, alone %v", name, b, o, got, one[o])
						}
					}
					if b < s.m-1 {
						for i := b*ldd + s.rows; i < (b+1)*ldd; i++ {
							if !math.IsNaN(float64(dst[i])) {
								t.Fatalf("%s: wrote %v at %d, past the row's outputs", name, dst[i], i)
							}
						}
					}
				}
			}
		}
	}
}

// TestPackedPool runs a packed matrix large enough for the 4-panel tiles
// through a Pool, whose chunks must fall on panel groups, against the
// dense matrix it was packed from, and checks dequantRow.
func TestPackedPool(t *testing.T) {
	r := newRand(t)
	for _, l := range Levels() {
		k, _ := ForLevel(l)
		p := NewPool(3, k)
		for _, s := range []struct{ batch, rows, cols int }{{1, 1000, 40}, {6, 1536, 24}, {9, 390, 17}} {
			data := encodeFloats(randFloats(r, s.rows*s.cols), tensor.F32)
			d, err := NewDense(tensor.F32, s.rows, s.cols, data)
			if err != nil {
				t.Fatal(err)
			}
			pk := PackF32(d)
			row := make([]float32, s.cols)
			for o := range s.rows {
				DequantizeRow(row, pk, o)
				for c, v := range row {
					if v != decodeFloat(data, o*s.cols+c, tensor.F32) {
						t.Fatalf("%v: packed row %d col %d: %v", l, o, c, v)
					}
				}
			}
			x := randFloats(r, s.batch*s.cols)
			got := make([]float32, s.batch*s.rows)
			want := make([]float32, s.batch*s.rows)
			p.MatMul(got, x, s.batch, pk)
			k.MatMul(want, x, s.batch, pk)
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%v %v: pool out %d = %v, one goroutine %v", l, s, i, got[i], want[i])
				}
			}
		}
		p.Close()
	}
}
