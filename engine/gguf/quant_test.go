package gguf

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"fusion/engine/tensor"
	"fusion/internal/testenv"
)

// quantInput returns rows of 256 values that exercise the quantizers:
// Gaussian rows of several scales, zeros, a constant, exact rounding ties,
// tiny values (subnormal fp16 scales), one outlier, and mixed signs.
func quantInput(r *rand.Rand) (rows, cols int, x []float32) {
	cols = 256
	var out []float32
	for _, s := range []float64{1, 0.02, 3e-3, 50} {
		for range 4 {
			out = append(out, gaussian(r, cols, s)...)
		}
	}
	out = append(out, make([]float32, cols)...) // zeros
	for range cols {
		out = append(out, 0.75) // constant
	}
	ties := make([]float32, cols)
	for i := range ties {
		// With amax 127 (Q8_0: d = 1) these land exactly on .5.
		ties[i] = float32(i%64) - 31.5
		if i%32 == 0 {
			ties[i] = 127
		}
	}
	out = append(out, ties...)
	out = append(out, gaussian(r, cols, 1e-6)...)
	outlier := gaussian(r, cols, 0.1)
	outlier[77] = -40
	out = append(out, outlier...)
	pos := gaussian(r, cols, 1)
	for i := range pos {
		pos[i] = abs32(pos[i]) + 0.5 // all positive: min > 0 paths
	}
	out = append(out, pos...)
	return len(out) / cols, cols, out
}

// TestQuantizeMatchesGGUFPackage checks our quantizers byte for byte
// against gguf.quants.quantize, which implements ggml's reference
// quantize_row_*_ref for these types (the K-quants it does not implement).
func TestQuantizeMatchesGGUFPackage(t *testing.T) {
	dir := t.TempDir()
	rows, cols, x := quantInput(rand.New(rand.NewPCG(3, 4)))
	if err := os.WriteFile(filepath.Join(dir, "in.f32"), f32Bytes(x), 0o644); err != nil {
		t.Fatal(err)
	}
	types := []tensor.DType{tensor.F16, tensor.BF16, tensor.Q8_0, tensor.Q4_0, tensor.Q4_1, tensor.Q5_0, tensor.Q5_1,
		tensor.MXFP4}
	var jobs []refJob
	for _, dt := range types {
		jobs = append(jobs, refJob{Op: "quantize", Type: dt.String(), Rows: rows, Cols: cols, In: "in.f32", Out: dt.String() + ".q"})
	}
	writeManifest(t, dir, jobs)
	runPython(t, "quants_ref.py", dir)
	for _, dt := range types {
		want, err := os.ReadFile(filepath.Join(dir, dt.String()+".q"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := Quantize(dt, x)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(got, want) {
			t.Logf("%v: %d bytes identical", dt, len(got))
			continue
		}
		if len(got) != len(want) {
			t.Fatalf("%v: %d bytes, reference %d", dt, len(got), len(want))
		}
		bb := dt.BlockBytes()
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%v: first difference in block %d (row %d) at byte %d: %#02x, reference %#02x",
					dt, i/bb, i/bb/(cols/dt.BlockElems()), i%bb, got[i], want[i])
				break
			}
		}
	}
}

// roundTrip quantizes x to dt and back.
func roundTrip(t *testing.T, dt tensor.DType, x []float32) []float32 {
	t.Helper()
	q, err := Quantize(dt, x)
	if err != nil {
		t.Fatal(err)
	}
	y := make([]float32, len(x))
	if err := DequantizeRow(dt, q, y); err != nil {
		t.Fatal(err)
	}
	return y
}

// TestQuantizeErrorBounds bounds the round-trip error of every
// quantizable type on Gaussian data: per element against what one block's
// step size allows, and as RMSE relative to the data's RMS.
func TestQuantizeErrorBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	x := gaussian(r, 64*256, 1)
	var rms float64
	for _, v := range x {
		rms += float64(v) * float64(v)
	}
	rms = math.Sqrt(rms / float64(len(x)))
	const fp16Rel = 1.0 / 1024 // slack for scales rounded to fp16
	tests := []struct {
		dt      tensor.DType
		group   int     // elements sharing one bound
		steps   float64 // max error in units of range/levels of the group
		levels  float64
		signed  bool    // range is 2·amax (symmetric types) rather than max−min
		maxRMSE float64 // relative to RMS (float types: relative per element)
	}{
		{tensor.F32, 1, 0, 1, false, 0},
		{tensor.F16, 1, 0, 1, false, 1.0 / 2048},
		{tensor.BF16, 1, 0, 1, false, 1.0 / 256},
		{tensor.Q8_0, 32, 0.5, 254, true, 0.006},
		{tensor.Q4_0, 32, 1, 16, true, 0.11},
		{tensor.Q4_1, 32, 0.5, 15, false, 0.09},
		{tensor.Q5_0, 32, 1, 32, true, 0.055},
		{tensor.Q5_1, 32, 0.5, 31, false, 0.045},
		// K-quants: the fitted scale may clip the extremes of a sub-block
		// and is itself stored in 6 (Q6_K: 8) bits, so allow two steps.
		{tensor.Q2_K, 16, 2, 3, false, 0.33},
		{tensor.Q3_K, 16, 2, 8, true, 0.17},
		{tensor.Q4_K, 32, 2, 15, false, 0.08},
		{tensor.Q5_K, 32, 2, 31, false, 0.04},
		{tensor.Q6_K, 16, 2, 64, true, 0.02},
	}
	for _, tc := range tests {
		t.Run(tc.dt.String(), func(t *testing.T) {
			y := roundTrip(t, tc.dt, x)
			var se, worst float64
			for g := 0; g < len(x); g += tc.group {
				xs, ys := x[g:g+tc.group], y[g:g+tc.group]
				lo, hi := minMax(xs)
				_, amax := absMax(xs)
				span := float64(hi - lo)
				if tc.signed {
					span = 2 * float64(amax)
				}
				bound := tc.steps*span/tc.levels + fp16Rel*float64(amax)
				for i := range xs {
					e := math.Abs(float64(ys[i] - xs[i]))
					if tc.group == 1 { // float types: relative rounding error
						bound = tc.maxRMSE * math.Abs(float64(xs[i]))
					}
					se += e * e
					if e > bound {
						t.Fatalf("element %d: %v came back as %v, error %g > bound %g", g+i, xs[i], ys[i], e, bound)
					}
					worst = max(worst, e)
				}
			}
			rel := math.Sqrt(se/float64(len(x))) / rms
			if rel > tc.maxRMSE || (tc.maxRMSE == 0 && rel != 0) {
				t.Errorf("relative RMSE %.5f > %.5f", rel, tc.maxRMSE)
			}
			t.Logf("%v: relative RMSE %.5f, max abs error %.4g", tc.dt, rel, worst)
		})
	}
}

func TestQuantizeEdgeCases(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.Q8_0, tensor.Q4_0, tensor.Q4_1, tensor.Q5_0, tensor.Q5_1, tensor.Q2_K, tensor.Q3_K, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K,
		tensor.MXFP4} {
		for _, tc := range []struct {
			name string
			fill func(i int) float32
		}{
			{"zeros", func(int) float32 { return 0 }},
			{"constant", func(int) float32 { return -1.25 }},
			{"ramp", func(i int) float32 { return float32(i%37) - 18 }},
		} {
			t.Run(fmt.Sprintf("%v/%s", dt, tc.name), func(t *testing.T) {
				x := make([]float32, 512)
				for i := range x {
					x[i] = tc.fill(i)
				}
				y := roundTrip(t, dt, x)
				for i := range x {
					tol := 0.13 * 18 // half a 4-bit step of the ramp's range
					if dt == tensor.Q2_K || dt == tensor.Q3_K {
						tol = 0.35 * 18
					}
					if d := math.Abs(float64(y[i] - x[i])); d > tol || math.IsNaN(float64(y[i])) {
						t.Fatalf("element %d: %v came back as %v", i, x[i], y[i])
					}
					if tc.name == "zeros" && y[i] != 0 {
						t.Fatalf("zero came back as %v", y[i])
					}
				}
			})
		}
	}
}

func TestQuantizeKnownQ8_0(t *testing.T) {
	x := make([]float32, 32)
	x[0], x[1], x[2], x[3] = 127, 0.5, -2.5, 1.49
	got, err := Quantize(tensor.Q8_0, x)
	if err != nil {
		t.Fatal(err)
	}
	// d = 127/127 = 1 (fp16 0x3c00); roundf rounds halves away from zero.
	want := append([]byte{0x00, 0x3c, 127, 1, 0xfd, 1}, make([]byte, 28)...)
	if !bytes.Equal(got, want) {
		t.Errorf("Q8_0 = % x\nwant % x", got, want)
	}
}

func TestQuantizeErrors(t *testing.T) {
	if _, err := Quantize(tensor.Q4_K, make([]float32, 100)); err == nil {
		t.Error("partial block: no error")
	}
	if _, err := Quantize(tensor.Q8_K, make([]float32, 256)); err == nil {
		t.Error("Q8_K: no error")
	}
	if err := QuantizeRow(tensor.Q8_0, make([]float32, 32), make([]byte, 33)); err == nil {
		t.Error("wrong destination size: no error")
	}
}

// TestQuantizeMatchesLlamaCpp is the oracle for the quantizers the gguf
// package lacks (the K-quants): llama.cpp's libggml-base.so, built by
// `scripts/llamacpp.sh --ggml-ref` (make test-deps) from the llama.cpp
// source vendored in PyPI's llama-cpp-python sdist, with GGML_NATIVE,
// GGML_FMA and GGML_AVX2 off so the C compiler cannot fuse multiply-adds
// ($FUSION_GGML_LIB names another); it compares every quantizer byte for
// byte with ggml_quantize_chunk, which runs quantize_row_*_ref.
func TestQuantizeMatchesLlamaCpp(t *testing.T) {
	lib := testenv.GGMLRef(t)
	py := testenv.Python(t)
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(17, 18))
	rows, cols, x := quantInput(r)
	for range 1000 { // rows of random scale, some heavy-tailed
		scale := math.Pow(10, r.Float64()*8-6)
		row := gaussian(r, cols, scale)
		if r.IntN(2) == 0 {
			for i := range row {
				row[i] /= float32(math.Abs(r.NormFloat64()) + 0.05)
			}
		}
		x = append(x, row...)
		rows++
	}
	if err := os.WriteFile(filepath.Join(dir, "in.f32"), f32Bytes(x), 0o644); err != nil {
		t.Fatal(err)
	}
	types := []tensor.DType{tensor.Q8_0, tensor.Q4_0, tensor.Q4_1, tensor.Q5_0, tensor.Q5_1, tensor.Q2_K, tensor.Q3_K, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K}
	type job struct {
		Op       string `json:"op"`
		Type     string `json:"type"`
		GGMLType uint32 `json:"ggml_type"`
		Rows     int    `json:"rows"`
		Cols     int    `json:"cols"`
		In       string `json:"in"`
		Out      string `json:"out"`
	}
	var jobs []job
	for _, dt := range types {
		id, err := GGMLTypeOf(dt)
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, job{"quantize", dt.String(), uint32(id), rows, cols, "in.f32", dt.String() + ".q"})
	}
	// Dequantization too, Q8_K included (the gguf package has no Q8_K).
	blockTypes := []tensor.DType{tensor.Q8_0, tensor.Q4_0, tensor.Q4_1, tensor.Q5_0, tensor.Q5_1,
		tensor.Q2_K, tensor.Q3_K, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K, tensor.Q8_K}
	raws := map[string][]byte{}
	for _, dt := range blockTypes {
		raw := randomBlocks(r, dt, 16, 1024)
		if dt == tensor.Q8_K {
			for b := 0; b < len(raw); b += dt.BlockBytes() {
				binary.LittleEndian.PutUint32(raw[b:], math.Float32bits(float32(r.NormFloat64())))
			}
		}
		raws[dt.String()] = raw
		if err := os.WriteFile(filepath.Join(dir, dt.String()+".raw"), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, job{"dequantize", dt.String(), 0, 16, 1024, dt.String() + ".raw", dt.String() + ".deq"})
	}
	// And llama.cpp's own GGUF reader on a file from our writer (without
	// the nested array, which ggml's reader refuses).
	var meta []KV
	for _, kv := range append(sampleMeta(t), KV{KeyAlignment, Uint32(64)}) {
		if kv.Value.Type() != TypeArray || kv.Value.ElemType() != TypeArray {
			meta = append(meta, kv)
		}
	}
	tensors := sampleTensors(r)
	if err := WriteFile(filepath.Join(dir, "ours.gguf"), meta, tensors); err != nil {
		t.Fatal(err)
	}
	jobs = append(jobs, job{Op: "gguf_read", In: "ours.gguf", Out: "ours.json"})
	b, _ := json.Marshal(jobs)
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, filepath.Join("testdata", "llamacpp_quant.py"), dir)
	cmd.Env = append(os.Environ(), "GGML_LIB="+lib)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("llamacpp_quant.py: %v\n%s", err, out)
	}
	for _, dt := range types {
		want, err := os.ReadFile(filepath.Join(dir, dt.String()+".q"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := Quantize(dt, x)
		if err != nil {
			t.Fatal(err)
		}
		bb := dt.BlockBytes()
		diff := 0
		for blk := 0; blk < len(got)/bb; blk++ {
			if !bytes.Equal(got[blk*bb:(blk+1)*bb], want[blk*bb:(blk+1)*bb]) {
				if diff == 0 {
					t.Errorf("%v: block %d differs:\n ours  % x\n ggml  % x", dt, blk, got[blk*bb:(blk+1)*bb], want[blk*bb:(blk+1)*bb])
				}
				diff++
			}
		}
		if diff > 0 {
			t.Errorf("%v: %d of %d blocks differ from llama.cpp", dt, diff, len(got)/bb)
		} else {
			t.Logf("%v: %d blocks identical to llama.cpp", dt, len(got)/bb)
		}
	}
	checkGGMLRead(t, filepath.Join(dir, "ours.json"), meta, tensors)
	for _, dt := range blockTypes {
		b, err := os.ReadFile(filepath.Join(dir, dt.String()+".deq"))
		if err != nil {
			t.Fatal(err)
		}
		want := bytesF32(b)
		got := make([]float32, len(want))
		if err := DequantizeRow(dt, raws[dt.String()], got); err != nil {
			t.Fatal(err)
		}
		diff := 0
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				diff++
			}
		}
		if diff > 0 {
			t.Errorf("%v: %d of %d dequantized values differ from llama.cpp", dt, diff, len(want))
		} else {
			t.Logf("%v: %d dequantized values identical to llama.cpp", dt, len(want))
		}
	}
}

// TestQuantizeNonFinite feeds NaN, ±Inf and extreme values to every
// quantizer: garbage in is allowed to give garbage out, but not a panic.
func TestQuantizeNonFinite(t *testing.T) {
	specials := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.MaxFloat32, -math.MaxFloat32, 1e-45, 0}
	r := rand.New(rand.NewPCG(21, 22))
	for _, dt := range []tensor.DType{tensor.F16, tensor.BF16, tensor.Q8_0, tensor.Q4_0, tensor.Q4_1, tensor.Q5_0, tensor.Q5_1,
		tensor.Q2_K, tensor.Q3_K, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K, tensor.MXFP4} {
		for _, s := range specials {
			x := gaussian(r, 512, 1)
			x[r.IntN(len(x))] = s
			x[r.IntN(len(x))] = s
			q, err := Quantize(dt, x)
			if err != nil {
				t.Fatalf("%v with %v: %v", dt, s, err)
			}
			if err := DequantizeRow(dt, q, make([]float32, len(x))); err != nil {
				t.Fatalf("%v with %v: %v", dt, s, err)
			}
		}
	}
}

// checkGGMLRead compares ggml's view of a file we wrote with what we wrote.
func checkGGMLRead(t *testing.T, summary string, meta []KV, tensors []WriteTensor) {
	t.Helper()
	b, err := os.ReadFile(summary)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Error      string  `json:"error"`
		Version    int     `json:"version"`
		Alignment  int     `json:"alignment"`
		DataOffset int64   `json:"data_offset"`
		KV         [][]any `json:"kv"`
		Tensors    [][]any `json:"tensors"`
	}
	if err := json.Unmarshal(b, &got); err != nil || got.Error != "" {
		t.Fatalf("ggml could not read our file: %v %s", err, got.Error)
	}
	if got.Version != 3 || got.Alignment != 64 || len(got.KV) != len(meta) || len(got.Tensors) != len(tensors) {
		t.Fatalf("ggml read version %d alignment %d, %d keys, %d tensors", got.Version, got.Alignment, len(got.KV), len(got.Tensors))
	}
	for i, kv := range meta {
		if got.KV[i][0] != kv.Key || got.KV[i][1] != float64(kv.Value.Type()) {
			t.Errorf("ggml key %d: %v, wrote %s (%d)", i, got.KV[i], kv.Key, kv.Value.Type())
		}
	}
	var offset int64
	for i, wt := range tensors {
		id, _ := GGMLTypeOf(wt.DType)
		want := []any{wt.Name, float64(id), float64(offset), float64(len(wt.Data))}
		if !reflect.DeepEqual(got.Tensors[i], want) {
			t.Errorf("ggml tensor %d: %v, want %v", i, got.Tensors[i], want)
		}
		offset += int64(alignUp(len(wt.Data), 64))
	}
	t.Logf("ggml's gguf reader accepts our file: %d keys, %d tensors, data at %d", len(got.KV), len(got.Tensors), got.DataOffset)
}
