package gguf

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"fusion/engine/tensor"
)

// fp16Fields lists the byte offsets of the fp16 scales inside one block of
// each block type; the parity test makes them finite and leaves the rest
// random.
var fp16Fields = map[tensor.DType][]int{
	tensor.Q8_0: {0},
	tensor.Q4_0: {0},
	tensor.Q4_1: {0, 2},
	tensor.Q5_0: {0},
	tensor.Q5_1: {0, 2},
	tensor.Q2_K: {80, 82},
	tensor.Q3_K: {108},
	tensor.Q4_K: {0, 2},
	tensor.Q5_K: {0, 2},
	tensor.Q6_K: {208},
}

// randomBlocks returns rows×cols elements of dt as random bytes whose
// floating-point fields are finite.
func randomBlocks(r *rand.Rand, dt tensor.DType, rows, cols int) []byte {
	size, err := dt.ByteSize(int64(rows * cols))
	if err != nil {
		panic(err)
	}
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	switch dt {
	case tensor.F16:
		for i := 0; i < len(b); i += 2 {
			binary.LittleEndian.PutUint16(b[i:], randomF16(r))
		}
	case tensor.F32, tensor.BF16:
		// any bits: both sides reinterpret them without arithmetic
	default:
		bb := dt.BlockBytes()
		for blk := 0; blk < len(b); blk += bb {
			for _, off := range fp16Fields[dt] {
				binary.LittleEndian.PutUint16(b[blk+off:], randomF16(r))
			}
		}
	}
	return b
}

var parityTypes = []tensor.DType{
	tensor.F32, tensor.F16, tensor.BF16,
	tensor.Q8_0, tensor.Q4_0, tensor.Q4_1, tensor.Q5_0, tensor.Q5_1,
	tensor.Q2_K, tensor.Q3_K, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K,
	tensor.MXFP4, // every scale byte: 0 and 1 (subnormal halves) and 255 too
}

// TestDequantizeMatchesGGUFPackage compares every element of random blocks
// of each type, bit for bit, with the numpy dequantizers of the gguf Python
// package (gguf.quants.dequantize).
func TestDequantizeMatchesGGUFPackage(t *testing.T) {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(1, 2))
	const rows = 16
	var jobs []refJob
	ours := map[string][]float32{}
	for _, dt := range parityTypes {
		cols := 4 * 256
		raw := randomBlocks(r, dt, rows, cols)
		name := dt.String()
		if err := os.WriteFile(filepath.Join(dir, name+".bin"), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, refJob{Op: "dequantize", Type: name, Rows: rows, Cols: cols, In: name + ".bin", Out: name + ".f32"})
		got := make([]float32, rows*cols)
		tt := tensor.Tensor{Name: name, DType: dt, Shape: []int64{rows, int64(cols)}, Data: raw}
		if err := Dequantize(tt, got); err != nil {
			t.Fatal(err)
		}
		ours[name] = got
	}
	writeManifest(t, dir, jobs)
	runPython(t, "quants_ref.py", dir)
	for _, job := range jobs {
		b, err := os.ReadFile(filepath.Join(dir, job.Out))
		if err != nil {
			t.Fatal(err)
		}
		want, got := bytesF32(b), ours[job.Type]
		if len(want) != len(got) {
			t.Fatalf("%s: reference has %d values, we have %d", job.Type, len(want), len(got))
		}
		mismatches := 0
		for i := range want {
			if math.Float32bits(want[i]) == math.Float32bits(got[i]) {
				continue
			}
			if mismatches < 5 {
				t.Errorf("%s: element %d (block %d) = %v (%#08x), gguf package says %v (%#08x)",
					job.Type, i, i/(job.Cols/4), got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
			mismatches++
		}
		if mismatches > 0 {
			t.Errorf("%s: %d of %d elements differ", job.Type, mismatches, len(want))
		} else {
			t.Logf("%s: %d elements bit-identical", job.Type, len(want))
		}
	}
}

func f16Bits(f float32) []byte {
	return binary.LittleEndian.AppendUint16(nil, tensor.F32ToF16(f))
}

func repeat(b byte, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}

func concat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestDequantizeKnownBlocks checks hand-computed values of one block of
// each layout.
func TestDequantizeKnownBlocks(t *testing.T) {
	// Q4_K scales: pairs 0–3 in the low six bits of bytes 0–7; pairs 4–7
	// split between bytes 8–11 (low nibbles) and the top bits of 0–7.
	q4kScales := []byte{
		1 | 1<<6, 2, 3, 4, // scales 0–3; bit 6 of byte 0 is the top bits of scale 4
		5, 6, 7, 8 | 2<<6, // mins 0–3; top bits of byte 7 are min 7's
		0x21, 0x00, 0x00, 0x03, // scale 4 low nibble 1, min 4 nibble 2, … scale 7 = 3, min 7 = 0
	}
	tests := []struct {
		name string
		dt   tensor.DType
		data []byte
		want map[int]float32 // element -> value
	}{
		{"Q8_0", tensor.Q8_0, concat(f16Bits(0.5), []byte{0x81, 0x7f, 0x02}, repeat(0, 29)),
			map[int]float32{0: -63.5, 1: 63.5, 2: 1, 31: 0}},
		{"Q4_0", tensor.Q4_0, concat(f16Bits(2), repeat(0x9f, 16)),
			map[int]float32{0: 14, 15: 14, 16: 2, 31: 2}},
		{"Q4_1", tensor.Q4_1, concat(f16Bits(0.25), f16Bits(-1), repeat(0x40, 16)),
			map[int]float32{0: -1, 16: 0}},
		{"Q5_0", tensor.Q5_0, concat(f16Bits(1), []byte{0x01, 0x00, 0x01, 0x00}, repeat(0x00, 16)),
			map[int]float32{0: 0, 1: -16, 16: 0, 17: -16}},
		{"Q5_1", tensor.Q5_1, concat(f16Bits(1), f16Bits(0.5), []byte{0xff, 0xff, 0xff, 0xff}, repeat(0xff, 16)),
			map[int]float32{0: 31.5, 31: 31.5}},
		{"Q4_K", tensor.Q4_K, concat(f16Bits(1), f16Bits(0.5), q4kScales, repeat(0x21, 128)),
			map[int]float32{
				0:   1*1 - 0.5*5,        // sub-block 0: scale 1 (low bits), min 5, q=1
				32:  2*2 - 0.5*6,        // sub-block 1: q=2
				64:  3*1 - 0.5*7,        // sub-block 2
				96:  4*2 - 0.5*8,        // sub-block 3: min is the low six bits of byte 7
				128: (1|1<<4)*1 - 0.5*2, // sub-block 4: scale = 1 | (byte0>>6)<<4 = 17, min = 2 | (byte4>>6)<<4 = 2
				255: 3*2 - 0.5*(0|2<<4), // sub-block 7: scale = 3 | (byte3>>6)<<4 = 3, min = 0 | (byte7>>6)<<4 = 32
			}},
		{"Q6_K", tensor.Q6_K, concat(repeat(0x21, 128), repeat(0xe4, 64), []byte{1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 0xff, 0xff}, f16Bits(0.5)),
			// qh 0xe4 = 11 10 01 00: q1 hi 0, q2 hi 1, q3 hi 2, q4 hi 3
			map[int]float32{
				0:   0.5 * 1 * (1 - 32),      // ql low 1
				32:  0.5 * 2 * (1 + 16 - 32), // ql[32] low 1, hi 1
				64:  0.5 * 3 * (2 + 32 - 32), // ql high 2, hi 2
				96:  0.5 * 4 * (2 + 48 - 32),
				255: 0.5 * -1 * (2 + 48 - 32), // second half, scales[15] = -1
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.dt.BlockElems()
			got := make([]float32, n)
			if err := DequantizeRow(tc.dt, tc.data, got); err != nil {
				t.Fatal(err)
			}
			for i, want := range tc.want {
				if got[i] != want {
					t.Errorf("element %d = %v, want %v", i, got[i], want)
				}
			}
		})
	}
}

func TestDequantizeRowErrors(t *testing.T) {
	tests := []struct {
		name string
		dt   tensor.DType
		src  int
		dst  int
	}{
		{"partial block", tensor.Q4_0, 18, 31},
		{"short source", tensor.Q4_K, 143, 256},
		{"long source", tensor.F32, 12, 2},
		{"not dequantizable", tensor.I32, 4, 1},
	}
	for _, tc := range tests {
		if err := DequantizeRow(tc.dt, make([]byte, tc.src), make([]float32, tc.dst)); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

func TestRow(t *testing.T) {
	data := make([]byte, 3*144*2)
	for i := range data {
		data[i] = byte(i)
	}
	tt := tensor.Tensor{Name: "w", DType: tensor.Q4_K, Shape: []int64{3, 512}, Data: data}
	rows, rb, err := Rows(tt)
	if err != nil || rows != 3 || rb != 288 {
		t.Fatalf("Rows = %d, %d, %v; want 3, 288", rows, rb, err)
	}
	row, err := Row(tt, 2)
	if err != nil || len(row) != 288 || row[0] != byte(576%256) {
		t.Fatalf("Row(2) = %d bytes starting %d, %v", len(row), row[0], err)
	}
	if _, err := Row(tt, 3); err == nil {
		t.Error("Row(3) of 3 rows did not fail")
	}
}
