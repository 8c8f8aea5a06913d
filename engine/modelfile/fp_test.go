package modelfile

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"

	"fusion/internal/testenv"
)

// Every code and every scale byte of each floating-point mode (NaN ones
// aside), dequantized here, is bit-identical to mlx.core.dequantize(…,
// dtype=float32) on the same bytes; and a matrix quantized by QuantizeFP
// comes back within half a code step of each value.
func TestDequantizeFPMatchesMLX(t *testing.T) {
	py := testenv.Python(t)
	if out, err := exec.Command(py, "-c", "import mlx.core").CombinedOutput(); err != nil {
		if testenv.Required() {
			t.Fatalf("mlx is not installed for %s: %s", py, out)
		}
		t.Skipf("mlx is not installed for %s", py)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	type job struct {
		Mode   string   `json:"mode"`
		Group  int      `json:"group"`
		Bits   int      `json:"bits"`
		Rows   int      `json:"rows"`
		Cols   int      `json:"cols"`
		Words  []uint32 `json:"words"`
		Scales []int    `json:"scales"` // not []uint8, which JSON writes as base64
	}
	var jobs []job
	for _, mode := range []string{ModeMXFP4, ModeMXFP8, ModeNVFP4} {
		f, _ := FP(mode)
		// Row r uses scale byte r for every group, with every code in
		// turn along it.
		rows, cols := 256, 256
		packed := make([]byte, rows*cols*f.Bits/8)
		for i := range rows * cols {
			c := uint8(i % (1 << f.Bits))
			if f.Bits == 8 && c&0x7f == 0x7f {
				c = uint8(rng.IntN(0x7f)) // not NaN
			}
			if f.Bits == 8 {
				packed[i] = c
			} else {
				packed[i/2] |= (c & 15) << (4 * (i % 2))
			}
		}
		scales := make([]byte, rows*cols/f.Group)
		for i := range scales {
			s := uint8(i / (cols / f.Group))
			if s == 0xff || (mode == ModeNVFP4 && s&0x7f == 0x7f) {
				s = 0x38 // the NaN scales left out: 1 in E4M3
			}
			scales[i] = s
		}
		words := make([]uint32, len(packed)/4)
		for i := range words {
			words[i] = binary.LittleEndian.Uint32(packed[4*i:])
		}
		ints := make([]int, len(scales))
		for i, s := range scales {
			ints[i] = int(s)
		}
		jobs = append(jobs, job{mode, f.Group, f.Bits, rows, cols, words, ints})
	}
	script := `
import json, sys
import mlx.core as mx
mx.set_default_device(mx.cpu)
out = []
for j in json.load(sys.stdin):
    w = mx.array(j["words"], dtype=mx.uint32).reshape(j["rows"], -1)
    s = mx.array(j["scales"], dtype=mx.uint8).reshape(j["rows"], -1)
    d = mx.dequantize(w, s, group_size=j["group"], bits=j["bits"], mode=j["mode"], dtype=mx.float32)
    out.append(d.reshape(-1).view(mx.uint32).tolist())
json.dump(out, sys.stdout)
`
	in, _ := json.Marshal(jobs)
	cmd := exec.Command(py, "-c", script)
	cmd.Stdin = bytes.NewReader(in)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, stderr.String())
	}
	var want [][]uint32
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	for i, j := range jobs {
		packed := make([]byte, 4*len(j.Words))
		for k, w := range j.Words {
			binary.LittleEndian.PutUint32(packed[4*k:], w)
		}
		scales := make([]byte, len(j.Scales))
		for k, s := range j.Scales {
			scales[k] = byte(s)
		}
		got, err := DequantizeFP(j.Mode, packed, scales, j.Rows, j.Cols)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range got {
			if math.Float32bits(v) != want[i][k] {
				t.Fatalf("%s: value %d (code byte %#x, scale %#x) is %v (%#x), mlx %v (%#x)", j.Mode, k, packed[k*j.Bits/8], scales[k/j.Group],
					v, math.Float32bits(v), math.Float32frombits(want[i][k]), want[i][k])
			}
		}
		t.Logf("%s: %d values bit-identical to mlx.core.dequantize", j.Mode, len(got))
	}
}

func TestQuantizeFP(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const rows, cols = 8, 64
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(rng.NormFloat64() * math.Pow(10, float64(i%5-2)))
	}
	for _, mode := range []string{ModeMXFP4, ModeMXFP8, ModeNVFP4} {
		f, _ := FP(mode)
		packed, scales, err := QuantizeFP(mode, w, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DequantizeFP(mode, packed, scales, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		codes := positiveCodes(f)
		for i, v := range got {
			s := f.Scale(scales[i/f.Group])
			x := abs32(w[i]) / s
			if x > codes[len(codes)-1].v*1.0001 {
				t.Fatalf("%s: value %d: %v beyond the codes at scale %v", mode, i, w[i], s)
			}
			// Within half the gap between the codes around x.
			j := 1
			for j < len(codes)-1 && codes[j].v < x {
				j++
			}
			if d := math.Abs(float64(v - w[i])); d > float64(codes[j].v-codes[j-1].v)*float64(s)/2*1.0001 {
				t.Fatalf("%s: value %d: %v came back as %v (scale %v)", mode, i, w[i], v, s)
			}
			if (v < 0) != (w[i] < 0) && v != 0 {
				t.Fatalf("%s: value %d: sign of %v lost (%v)", mode, i, w[i], v)
			}
		}
	}
}
