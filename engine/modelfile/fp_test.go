package modelfile

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"fusion/engine/tensor"
	"fusion/internal/testenv"
)

// Every code and every scale byte of each floating-point mode (NaN ones
// aside), dequantized here, is bit-identical to mlx.core.dequantize(…,
// dtype=float32) on the same bytes; and a matrix quantized by QuantizeFP
// comes back within half a code step of each value.
func TestDequantizeFPMatchesMLX(t *testing.T) {
	py := pythonMLX(t)
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
	var want [][]uint32
	pythonJSON(t, py, script, jobs, &want)
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

// TestQuantizeFP: every value comes back within half the gap between the
// codes around it, or as the largest code when it is beyond it (an E8M0
// scale rounds, so a group's largest value may be up to √2 times the
// largest code), with its sign.
func TestQuantizeFP(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const rows, cols = 8, 64
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(rng.NormFloat64() * math.Pow(10, float64(i%5-2)))
	}
	for _, mode := range []string{ModeMXFP4, ModeMXFP8, ModeNVFP4} {
		f, _ := FP(mode)
		packed, scales, err := QuantizeFP(mode, tensor.F32, w, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DequantizeFP(mode, packed, scales, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		codes := positiveCodes(f)
		top := codes[len(codes)-1].v
		saturated := 0
		for i, v := range got {
			s := f.Scale(scales[i/f.Group])
			x := abs32(w[i]) / s
			if x > top*1.415 {
				t.Fatalf("%s: value %d: %v is %v times the scale %v", mode, i, w[i], x, s)
			}
			if (v < 0) != (w[i] < 0) && v != 0 {
				t.Fatalf("%s: value %d: sign of %v lost (%v)", mode, i, w[i], v)
			}
			if x > top {
				saturated++
				if abs32(v) != top*s {
					t.Fatalf("%s: value %d: %v beyond the codes came back as %v, not the largest code at scale %v", mode, i, w[i], v, s)
				}
				continue
			}
			// Within half the gap between the codes around x.
			j := 1
			for j < len(codes)-1 && codes[j].v < x {
				j++
			}
			if d := math.Abs(float64(v - w[i])); d > float64(codes[j].v-codes[j-1].v)*float64(s)/2*1.0001 {
				t.Fatalf("%s: value %d: %v came back as %v (scale %v)", mode, i, w[i], v, s)
			}
		}
		t.Logf("%s: %d of %d values saturated", mode, saturated, len(w))
	}
	if _, _, err := QuantizeFP(ModeMXFP4, tensor.U8, w, rows, cols); err == nil {
		t.Error("U8 weights quantized")
	}
}

// TestQuantizeFPMatchesMLX: QuantizeFP's codes and scales are
// mlx.core.quantize's, byte for byte, for weights in bf16, f16 and f32
// (the rows' magnitudes spread over 2^±4 so that the rounding of each
// group's scale is tried near its ties; two rows of zeros, and tiny negatives beside large values).
func TestQuantizeFPMatchesMLX(t *testing.T) {
	py := pythonMLX(t)
	rng := rand.New(rand.NewPCG(11, 12))
	const rows, cols = 64, 256
	type job struct {
		Mode   string    `json:"mode"`
		DType  string    `json:"dtype"`
		Values []float32 `json:"values"`
	}
	var jobs []job
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16, tensor.F32} {
		round, _ := rounder(dt)
		w := make([]float32, rows*cols)
		for i := range w {
			w[i] = round(float32(rng.NormFloat64() * math.Exp2(float64(i/cols%9-4)+rng.Float64())))
		}
		clear(w[:2*cols]) // all-zero groups too
		for i := 2 * cols; i < 3*cols; i += 7 {
			w[i] = round(float32(-1e-6 * (0.5 + rng.Float64()/2))) // negatives that round to a zero code (not to −0 itself: JSON would lose its sign)
		}
		for _, mode := range []string{ModeMXFP4, ModeMXFP8, ModeNVFP4} {
			jobs = append(jobs, job{mode, strings.ToLower(dt.String()), w})
		}
	}
	script := `
import json, sys
import mlx.core as mx
mx.set_default_device(mx.cpu)
dtypes = {"bf16": mx.bfloat16, "f16": mx.float16, "f32": mx.float32}
out = []
for j in json.load(sys.stdin):
    w = mx.array(j["values"], dtype=mx.float32).astype(dtypes[j["dtype"]]).reshape(` + strconv.Itoa(rows) + `, -1)
    q, s = mx.quantize(w, mode=j["mode"])[:2]
    out.append({"codes": q.reshape(-1).tolist(), "scales": s.reshape(-1).tolist()})
json.dump(out, sys.stdout)
`
	var want []struct {
		Codes  []uint32 `json:"codes"`
		Scales []int    `json:"scales"`
	}
	pythonJSON(t, py, script, jobs, &want)
	if len(want) != len(jobs) {
		t.Fatalf("%d answers for %d matrices", len(want), len(jobs))
	}
	for i, j := range jobs {
		dt := map[string]tensor.DType{"bf16": tensor.BF16, "f16": tensor.F16, "f32": tensor.F32}[j.DType]
		packed, scales, err := QuantizeFP(j.Mode, dt, j.Values, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		bad := 0
		for k, s := range scales {
			if int(s) != want[i].Scales[k] {
				if bad++; bad <= 3 {
					t.Errorf("%s %s: group %d: scale %#x, mlx %#x", j.Mode, j.DType, k, s, want[i].Scales[k])
				}
			}
		}
		for k, w := range want[i].Codes {
			if got := binary.LittleEndian.Uint32(packed[4*k:]); got != w {
				if bad++; bad <= 3 {
					t.Errorf("%s %s: word %d: %#08x, mlx %#08x", j.Mode, j.DType, k, got, w)
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s %s: %d scales or words differ from mlx.core.quantize", j.Mode, j.DType, bad)
		}
	}
}

// pythonMLX returns the test Python if it has mlx; without it the test
// fails under FUSION_REQUIRE_FIXTURES=1 and skips otherwise.
func pythonMLX(t *testing.T) string {
	t.Helper()
	py := testenv.Python(t)
	if out, err := exec.Command(py, "-c", "import mlx.core").CombinedOutput(); err != nil {
		if testenv.Required() {
			t.Fatalf("mlx is not installed for %s: %s", py, out)
		}
		t.Skipf("mlx is not installed for %s", py)
	}
	return py
}

// pythonJSON runs script with in as JSON on its stdin and decodes its
// stdout into out.
func pythonJSON(t *testing.T, py, script string, in, out any) {
	t.Helper()
	raw, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-c", script)
	cmd.Stdin = bytes.NewReader(raw)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if raw, err = cmd.Output(); err != nil {
		t.Fatalf("python: %v\n%s", err, stderr.String())
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatal(err)
	}
}
