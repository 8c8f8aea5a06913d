package kernels

import (
	"math"
	"testing"

	"fusion/engine/tensor"
)

func TestConstructorsRejectBadShapes(t *testing.T) {
	bf := tensor.BF16
	tests := []struct {
		name string
		err  error
	}{
		{"dense zero rows", err2(NewDense(bf, 0, 4, nil))},
		{"dense short", err2(NewDense(bf, 2, 4, make([]byte, 15)))},
		{"dense long", err2(NewDense(bf, 2, 4, make([]byte, 17)))},
		{"dense I8", err2(NewDense(tensor.I8, 2, 4, make([]byte, 8)))},
		{"f32 short", err2(NewF32(2, 4, make([]float32, 7)))},
		{"mlx bits 7", err2(NewMLXAffine(1, 64, 7, 64, make([]byte, 56), make([]byte, 2), make([]byte, 2), bf))},
		{"mlx group 16", err2(NewMLXAffine(1, 64, 4, 16, make([]byte, 32), make([]byte, 8), make([]byte, 8), bf))},
		{"mlx cols", err2(NewMLXAffine(1, 96, 4, 64, make([]byte, 48), make([]byte, 4), make([]byte, 4), bf))},
		{"mlx packed", err2(NewMLXAffine(1, 64, 4, 64, make([]byte, 31), make([]byte, 2), make([]byte, 2), bf))},
		{"mlx scales", err2(NewMLXAffine(1, 64, 4, 64, make([]byte, 32), make([]byte, 4), make([]byte, 2), bf))},
		{"mlx biases", err2(NewMLXAffine(1, 64, 4, 64, make([]byte, 32), make([]byte, 2), make([]byte, 3), bf))},
		{"mlx scale type", err2(NewMLXAffine(1, 64, 4, 64, make([]byte, 32), make([]byte, 1), make([]byte, 1), tensor.U8))},
		{"gguf type", err2(NewGGUF(tensor.Q4_1, 1, 32, make([]byte, 20)))},
		{"gguf cols", err2(NewGGUF(tensor.Q4_K, 1, 288, make([]byte, 162)))},
		{"gguf len", err2(NewGGUF(tensor.Q8_0, 2, 32, make([]byte, 34)))},
		{"huge", err2(NewGGUF(tensor.Q8_0, math.MaxInt32, math.MaxInt32, nil))},
	}
	for _, tc := range tests {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if _, err := NewMLXAffine(2, 64, 4, 64, make([]byte, 64), make([]byte, 4), make([]byte, 4), bf); err != nil {
		t.Errorf("valid MLX rejected: %v", err)
	}
}

func err2[T any](_ T, err error) error { return err }

// MLX dequantization must reproduce scale·q + bias exactly.
func TestMLXDequantizeExact(t *testing.T) {
	r := newRand(t)
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, sdt := range []tensor.DType{tensor.BF16, tensor.F16, tensor.F32} {
			c := randMLX(r, 3, 256, bits, 64, sdt)
			w, ref := c.weights(t), c.ref()
			row := make([]float32, c.cols)
			for o := 0; o < c.rows; o++ {
				DequantizeRow(row, w, o)
				for i, v := range row {
					if float64(v) != ref.at(o, i) {
						t.Fatalf("bits %d %v row %d col %d: %v, want %v", bits, sdt, o, i, v, ref.at(o, i))
					}
				}
			}
		}
	}
}

func TestGGUFAndDenseDequantizeExact(t *testing.T) {
	r := newRand(t)
	for _, c := range []weightCase{ggufCase(tensor.Q8_0), ggufCase(tensor.Q4_0), ggufCase(tensor.Q4_K),
		ggufCase(tensor.Q6_K), ggufCase(tensor.Q2_K), ggufCase(tensor.Q3_K), ggufCase(tensor.Q5_K), denseCase(tensor.F32), denseCase(tensor.BF16), denseCase(tensor.F16)} {
		w, ref, err := c.make(r, 3, 512)
		if err != nil {
			t.Fatal(err)
		}
		row := make([]float32, 512)
		for o := 0; o < 3; o++ {
			DequantizeRow(row, w, o)
			for i, v := range row {
				if float64(v) != ref.at(o, i) {
					t.Fatalf("%s row %d col %d: %v, want %v", c.name, o, i, v, ref.at(o, i))
				}
			}
		}
	}
}

// The MLX bit-stream reading must agree with the uint32-word definition
// for the word-aligned widths.
func TestMLXWordPacking(t *testing.T) {
	words := []uint32{0x76543210, 0xfedcba98}
	b := make([]byte, 8)
	for i, w := range words {
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(w), byte(w>>8), byte(w>>16), byte(w>>24)
	}
	for i := 0; i < 16; i++ {
		want := words[i/8] >> (4 * (i % 8)) & 15
		if got := mlxCode(b, 4, i); got != want || got != uint32(i) {
			t.Fatalf("4-bit element %d = %d, want %d", i, got, want)
		}
	}
	for i := 0; i < 8; i++ {
		if got, want := mlxCode(b, 8, i), words[i/4]>>(8*(i%4))&255; got != want {
			t.Fatalf("8-bit element %d = %d, want %d", i, got, want)
		}
	}
}
