package modelfile

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"fusion/engine/tensor"
)

var (
	allBits   = []int{2, 3, 4, 5, 6, 8}
	allGroups = []int{32, 64, 128}
)

// TestAffineMatchesMLX compares against mlx.core.quantize/dequantize
// outputs recorded from MLX 0.31.2 on the CPU (testdata/gen_mlx_golden.py):
// packed words, scales and biases bit for bit, for every bits/group-size
// pair, on float32 and bfloat16 inputs, including all-zero, constant,
// all-positive and all-negative groups and rounding ties.
func TestAffineMatchesMLX(t *testing.T) {
	raw, err := os.ReadFile("testdata/mlx_affine_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Rows, Cols int
		InputBits  []uint32 `json:"input_f32_bits"`
		Cases      []struct {
			DType     string
			Bits      int
			GroupSize int `json:"group_size"`
			Packed    []uint32
			Scales    []uint32
			Biases    []uint32
			Deq       string `json:"dequantized_sha256"`
		}
	}
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	if len(golden.Cases) != 2*len(allBits)*len(allGroups) {
		t.Fatalf("%d golden cases", len(golden.Cases))
	}
	for _, c := range golden.Cases {
		t.Run(fmt.Sprintf("%s/bits%d/group%d", c.DType, c.Bits, c.GroupSize), func(t *testing.T) {
			// The input in the model dtype, widened to float32 as MLX does.
			round := func(f float32) float32 { return f }
			store := math.Float32bits
			if c.DType == "bfloat16" {
				round = func(f float32) float32 { return tensor.BF16ToF32(tensor.F32ToBF16(f)) }
				store = func(f float32) uint32 { return uint32(tensor.F32ToBF16(f)) }
			}
			w := make([]float32, len(golden.InputBits))
			for i, b := range golden.InputBits {
				w[i] = round(math.Float32frombits(b))
			}
			packed, scales, biases, err := QuantizeAffine(w, golden.Rows, golden.Cols, c.GroupSize, c.Bits)
			if err != nil {
				t.Fatal(err)
			}
			if i := firstDiff(packed, c.Packed); i >= 0 {
				t.Fatalf("packed word %d = %#08x, MLX %#08x", i, packed[i], c.Packed[i])
			}
			stored := func(v []float32) []uint32 {
				out := make([]uint32, len(v))
				for i, f := range v {
					out[i] = store(f)
				}
				return out
			}
			if got := stored(scales); firstDiff(got, c.Scales) >= 0 {
				i := firstDiff(got, c.Scales)
				t.Fatalf("scale %d = %#x, MLX %#x", i, got[i], c.Scales[i])
			}
			if got := stored(biases); firstDiff(got, c.Biases) >= 0 {
				i := firstDiff(got, c.Biases)
				t.Fatalf("bias %d = %#x, MLX %#x", i, got[i], c.Biases[i])
			}
			// Dequantize from the scales and biases as stored in the dtype.
			for i := range scales {
				scales[i], biases[i] = round(scales[i]), round(biases[i])
			}
			deq, err := DequantizeAffine(packed, scales, biases, golden.Rows, golden.Cols, c.GroupSize, c.Bits)
			if err != nil {
				t.Fatal(err)
			}
			if c.DType == "bfloat16" {
				// MLX computes in bfloat16: the product and the sum are each
				// rounded to bfloat16.
				q := UnpackAffine(packed, c.Bits, 0, len(deq))
				for i := range deq {
					g := i / c.GroupSize
					deq[i] = round(round(float32(q[i])*scales[g]) + biases[g])
				}
			}
			buf := make([]byte, 4*len(deq))
			for i, f := range deq {
				binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(f))
			}
			if sum := sha256.Sum256(buf); hex.EncodeToString(sum[:]) != c.Deq {
				t.Errorf("dequantized values differ from mlx.core.dequantize")
			}
		})
	}
}

func firstDiff(a, b []uint32) int {
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) || a[i] != b[i] {
			return i
		}
	}
	return -1
}

// TestAffinePacking checks the bit layout: value i of a row occupies bits
// [i·b, (i+1)·b) of the little-endian stream, straddling words for 3, 5
// and 6 bits, and every value 0..2^b−1 survives packing.
func TestAffinePacking(t *testing.T) {
	for _, bits := range allBits {
		n := 96 // 3 words per 32 values at 3 bits, a straddle every few values
		words := make([]uint32, n*bits/32)
		want := make([]uint8, n)
		for i := range want {
			want[i] = uint8((i*37 + 11) % (1 << bits))
			putBits(words, i*bits, bits, uint32(want[i]))
		}
		if got := UnpackAffine(words, bits, 0, n); !slices.Equal(got, want) {
			t.Errorf("bits %d: unpacked %v, want %v", bits, got, want)
		}
		// Reference: build the stream bit by bit.
		ref := make([]uint32, len(words))
		for i, v := range want {
			for k := range bits {
				if v>>k&1 == 1 {
					pos := i*bits + k
					ref[pos/32] |= 1 << (pos % 32)
				}
			}
		}
		if !slices.Equal(words, ref) {
			t.Errorf("bits %d: packed %x, want %x", bits, words, ref)
		}
	}
	// A hand-checked layout: 3-bit values 0..7, 1, 2 fill bits 0..29 of
	// word 0, and the eleventh value (2 = 0b010) straddles: its low bits
	// 10 land in bits 30..31 of word 0, its high bit 0 in bit 0 of word 1.
	words := make([]uint32, 3)
	for i, v := range []uint32{0, 1, 2, 3, 4, 5, 6, 7, 1, 2, 2, 7} {
		putBits(words, 3*i, 3, v)
	}
	if words[0] != 0x91fac688 || words[1] != 0b1110 {
		t.Errorf("words %#x %#x, want 0x91fac688 0xe", words[0], words[1])
	}
	if got := UnpackAffine(words, 3, 8, 4); !slices.Equal(got, []uint8{1, 2, 2, 7}) {
		t.Errorf("straddling values: %v", got)
	}
}

// TestAffineGridExact builds groups that lie exactly on a quantization
// grid with power-of-two steps, so every float operation is exact: the
// quantizer must recover the integers, and dequantization the values.
func TestAffineGridExact(t *testing.T) {
	for _, bits := range allBits {
		for _, group := range allGroups {
			n := 1<<bits - 1
			const rows = 2
			cols := 2 * group
			step := float32(1.0 / 64)
			w := make([]float32, rows*cols)
			q := make([]int, rows*cols)
			for i := range w {
				q[i] = (i*7 + 3) % (n + 1)
			}
			for g := range rows * cols / group {
				// Every group spans the whole grid: put 0 and n in it.
				q[g*group], q[g*group+1] = 0, n
				negative := g%2 == 0
				for j := range group {
					i := g*group + j
					if negative { // |min| > |max|: the min edge is exact, scale > 0
						w[i] = -float32(n+3)*step + float32(q[i])*step
					} else { // all positive: the max edge is exact, scale < 0
						w[i] = 5*step + float32(q[i])*step
					}
				}
			}
			packed, scales, biases, err := QuantizeAffine(w, rows, cols, group, bits)
			if err != nil {
				t.Fatal(err)
			}
			for g := range scales {
				negative := g%2 == 0
				wantScale, wantBias := step, -float32(n+3)*step
				if !negative {
					wantScale, wantBias = -step, 5*step+float32(n)*step
				}
				if scales[g] != wantScale || biases[g] != wantBias {
					t.Fatalf("bits %d group %d: group %d scale %v bias %v, want %v %v", bits, group, g, scales[g], biases[g], wantScale, wantBias)
				}
			}
			got := UnpackAffine(packed, bits, 0, rows*cols)
			for i := range got {
				want := q[i]
				if (i/group)%2 == 1 {
					want = n - q[i] // counted down from the max edge
				}
				if int(got[i]) != want {
					t.Fatalf("bits %d group %d: q[%d] = %d, want %d", bits, group, i, got[i], want)
				}
			}
			deq, err := DequantizeAffine(packed, scales, biases, rows, cols, group, bits)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(deq, w) {
				t.Fatalf("bits %d group %d: dequantized values differ", bits, group)
			}
		}
	}
}

// TestAffineRandomWithinHalfStep: with float32 scales, every value comes
// back as the grid point nearest to it: within half a step inside the grid,
// or a grid end outside it (MLX rescales the step so the edge of larger
// magnitude is exact, so the grid may stop short of the other edge).
// Constant groups come back exactly.
func TestAffineRandomWithinHalfStep(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, bits := range allBits {
		for _, group := range allGroups {
			rows, cols := 3, 256
			w := make([]float32, rows*cols)
			for i := range w {
				w[i] = float32(rng.NormFloat64() * 0.05)
			}
			for j := range group { // one constant group
				w[j] = 0.3
			}
			packed, scales, biases, err := QuantizeAffine(w, rows, cols, group, bits)
			if err != nil {
				t.Fatal(err)
			}
			deq, _ := DequantizeAffine(packed, scales, biases, rows, cols, group, bits)
			for i := range w {
				s, b := scales[i/group], biases[i/group]
				nearest := float32(math.Inf(1))
				for q := range 1 << bits {
					nearest = min(nearest, abs32(float32(q)*s+b-w[i]))
				}
				if d := abs32(deq[i] - w[i]); d > nearest+abs32(s)*1e-4+1e-7 {
					t.Fatalf("bits %d group %d: value %d = %v came back %v; the nearest grid point is %v away", bits, group, i, w[i], deq[i], nearest)
				}
				if nearest > abs32(s)/2*(1+1e-4) && deq[i] != b && deq[i] != float32(int(1)<<bits-1)*s+b {
					t.Fatalf("bits %d group %d: value %d = %v off the grid came back %v, not a grid end", bits, group, i, w[i], deq[i])
				}
			}
			for j := range group {
				if deq[j] != 0.3 {
					t.Fatalf("bits %d group %d: constant group value %v", bits, group, deq[j])
				}
			}
		}
	}
}

func TestAffineRejects(t *testing.T) {
	w := make([]float32, 64)
	for _, tc := range []struct{ rows, cols, group, bits int }{
		{1, 64, 64, 7}, {1, 64, 48, 4}, {1, 48, 32, 4}, {2, 64, 64, 4}, {0, 0, 32, 4},
	} {
		if _, _, _, err := QuantizeAffine(w, tc.rows, tc.cols, tc.group, tc.bits); err == nil {
			t.Errorf("QuantizeAffine(%+v) succeeded", tc)
		}
	}
	if _, err := DequantizeAffine(make([]uint32, 3), make([]float32, 1), make([]float32, 1), 1, 64, 64, 4); err == nil {
		t.Error("DequantizeAffine accepted 3 words for 64 4-bit values")
	}
}
