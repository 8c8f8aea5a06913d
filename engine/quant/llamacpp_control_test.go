package quant

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"fusion/engine/gguf"
	"fusion/engine/tensor"
	"fusion/internal/testenv"
)

// llamaCppControlTolerance bounds |Δ log-probability| between fusion on a
// quantized GGUF and llama.cpp on that file's dequantized-F32 twin: the
// same weight values on both sides, llama.cpp's matmuls then in float32
// (no 8-bit activation rounding), so only the F32 row's differences (its
// F16 KV cache, summation order) are left. Near the F32 row's tolerance.
const llamaCppControlTolerance = 0.1

// llamaCppControl is TestLlamaCppRunsOurGGUF's dequantized-F32 control.
// Both sides round activations to 8 bits before their products on
// quantized weights — llama.cpp to Q8_0 blocks of 32 for Q8_0 weights and
// to Q8_K blocks of 256 for the K-quants, fusion's CPU kernels to blocks
// of 32 for all — so the quantized rows of the main test compare two
// different roundings. The control takes both out. For every quantized
// file it writes a twin: the same metadata and tensors, each tensor our
// dequantization of the quantized one (F32), checked bit for bit against
// the gguf package's dequantize. llama.cpp runs the twins (F32 products,
// no activation rounding), and fusion runs each quantized file with
// ExactActivations (the same weight values, f32 activations): the two
// must agree as tightly as on the F32 file (within
// llamaCppControlTolerance, the same greedy token at every step). Then
// each side's rounding is measured against that common ground: llama.cpp
// on the quantized file vs on its twin, and fusion's default kernels on
// the quantized file vs llama.cpp on the twin; both must exceed the
// control's disagreement. reports are llama.cpp's on files, in the order
// of types.
func llamaCppControl(t *testing.T, py, lc, prompt string, ids []int, types, files []string, reports []llamaCppReport) {
	start := time.Now()
	var quantTypes, quantFiles, twins []string
	var quantReports []llamaCppReport
	for i, typ := range types {
		if typ == "F32" {
			continue
		}
		quantTypes = append(quantTypes, typ)
		quantFiles = append(quantFiles, files[i])
		quantReports = append(quantReports, reports[i])
		twins = append(twins, dequantizedTwin(t, files[i], filepath.Join(t.TempDir(), typ+"-f32.gguf")))
	}
	t.Logf("%d twins written in %v", len(twins), time.Since(start).Round(time.Millisecond))
	checkTwinsBitEqual(t, py, quantFiles, twins)
	t.Logf("twins checked against the gguf package by %v", time.Since(start).Round(time.Millisecond))
	twinReports := runLlamaCpp(t, py, lc, prompt, twins)
	t.Logf("llama.cpp ran the twins by %v", time.Since(start).Round(time.Millisecond))
	for i, typ := range quantTypes {
		rep := twinReports[i]
		if !slices.Equal(rep.Tokens, ids) {
			t.Errorf("%s twin: llama.cpp tokenizes the prompt as\n%v\nwe do as\n%v", typ, rep.Tokens, ids)
			continue
		}
		c := compareLlamaCpp(t, typ+" (fusion, f32 activations) vs llama.cpp on its F32 twin", quantFiles[i], true, rep, ids, llamaCppControlTolerance)
		if c.same != llamaCppSteps {
			t.Errorf("%s: fusion's greedy token is llama.cpp's on the twin at %d of %d steps, want all", typ, c.same, llamaCppSteps)
		}
		// llama.cpp against itself: the quantized file and its twin hold
		// the same weight values, so the gap is llama.cpp's activation
		// rounding alone.
		gap, positions := llamaCppGap(quantReports[i], rep, len(ids))
		t.Logf("%s: llama.cpp on the quantized file vs on its F32 twin: max |Δ log-prob| over the top %d of the %d positions both ran %.5f",
			typ, llamaCppTop, positions, gap)
		// fusion's own rounding, against the same ground (its greedy path
		// drifts from the twin's as llama.cpp's does: near-ties within
		// the file type's tolerance are accepted).
		ours := compareLlamaCpp(t, typ+" (fusion, 8-bit activations) vs llama.cpp on its F32 twin", quantFiles[i], false, rep, ids, llamaCppTolerance[typ])
		for _, g := range []struct {
			who string
			gap float64
		}{{"llama.cpp's", gap}, {"fusion's", ours.worst}} {
			if g.gap <= 2*c.worst || g.gap <= llamaCppControlTolerance {
				t.Errorf("%s: %s activation rounding moves log-probabilities by %.5f, not clearly more than the control's %.5f: the attribution does not hold", typ, g.who, g.gap, c.worst)
			}
		}
		t.Logf("%s compared by %v", typ, time.Since(start).Round(time.Millisecond))
	}
}

// dequantizedTwin writes to dst an F32 GGUF holding path's metadata
// (general.file_type made ALL_F32) and every tensor of path dequantized
// by the gguf package (ggml's dequantize_row_* bit for bit), in the same
// order, names and shapes.
func dequantizedTwin(t *testing.T, path, dst string) string {
	t.Helper()
	f, err := gguf.Open(path, gguf.LoadMmap)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	meta := make([]gguf.KV, len(f.KV))
	for i, kv := range f.KV {
		if kv.Key == gguf.KeyFileType {
			kv.Value = gguf.Uint32(0) // LLAMA_FTYPE_ALL_F32
		}
		meta[i] = kv
	}
	out := make([]gguf.WriteTensor, len(f.Tensors))
	for i, src := range f.Tensors {
		v, err := gguf.ToFloat32(src)
		if err != nil {
			t.Fatalf("%s: %v", src.Name, err)
		}
		data := make([]byte, 4*len(v))
		for j, x := range v {
			binary.LittleEndian.PutUint32(data[4*j:], math.Float32bits(x))
		}
		out[i] = gguf.WriteTensor{Name: src.Name, DType: tensor.F32, Shape: src.Shape, Data: data}
	}
	if err := gguf.WriteFile(dst, meta, out); err != nil {
		t.Fatal(err)
	}
	return dst
}

// twinCheck is what testdata/gguf_dequant_ref.py prints for one pair.
type twinCheck struct {
	Tensors    int            `json:"tensors"`
	Types      map[string]int `json:"types"`
	Mismatched []string       `json:"mismatched"`
}

// shiftedSuffix names the entry checkTwinsBitEqual adds to show that the
// comparison can fail.
const shiftedSuffix = " (shifted)"

// twinTensor locates one tensor's data in a quantized file and in its
// twin, for testdata/gguf_dequant_ref.py.
type twinTensor struct {
	Name     string `json:"name"`
	Type     uint32 `json:"type"` // ggml type in the quantized file
	Elements int64  `json:"elements"`
	Bytes    int    `json:"bytes"` // in the quantized file
	Offset   int64  `json:"offset"`
	Twin     int64  `json:"twin_offset"` // of its F32 values in the twin
}

// checkTwinsBitEqual has the gguf package dequantize every tensor of
// each quantized file and compare it bit for bit with the twin's. The
// script reads the tensors' bytes at the offsets our reader found (the
// package's GGUFReader parses the 151,936-entry tokenizer arrays element
// by element: minutes per file on a loaded machine); that the files are
// laid out as GGUF says is TestGGUFExport's check with that reader, and
// llama.cpp's when it runs the twins.
func checkTwinsBitEqual(t *testing.T, py string, files, twins []string) {
	t.Helper()
	type pair struct {
		File    string       `json:"file"`
		Twin    string       `json:"twin"`
		Tensors []twinTensor `json:"tensors"`
	}
	var req []pair
	for i := range files {
		q, err := gguf.Open(files[i], gguf.LoadMmap)
		if err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Open(twins[i], gguf.LoadMmap)
		if err != nil {
			t.Fatal(err)
		}
		p := pair{File: files[i], Twin: twins[i]}
		for _, x := range q.Tensors {
			typ, err := gguf.GGMLTypeOf(x.DType)
			if err != nil {
				t.Fatal(err)
			}
			n, err := tensor.NumElements(x.Shape)
			if err != nil {
				t.Fatal(err)
			}
			qo, _ := q.TensorOffset(x.Name)
			to, ok := f.TensorOffset(x.Name)
			if y, _ := f.Tensor(x.Name); !ok || y.DType != tensor.F32 || !slices.Equal(y.Shape, x.Shape) {
				t.Fatalf("%s: the twin's %s is %v %v (present %v), want F32 %v", twins[i], x.Name, y.DType, y.Shape, ok, x.Shape)
			}
			p.Tensors = append(p.Tensors, twinTensor{Name: x.Name, Type: uint32(typ), Elements: n, Bytes: len(x.Data), Offset: qo, Twin: to})
		}
		q.Close()
		f.Close()
		// A check that can fail: the first quantized tensor again, read
		// from the twin one value off, must differ.
		for _, x := range p.Tensors[:len(p.Tensors)-1] {
			if x.Type != 0 {
				x.Name, x.Twin = x.Name+shiftedSuffix, x.Twin+4
				p.Tensors = append(p.Tensors, x)
				break
			}
		}
		req = append(req, p)
	}
	in, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := testenv.ClientContext(t)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "gguf_dequant_ref.py"))
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.CombinedOutput()
	if err != nil && !testenv.Required() && strings.Contains(string(out), "ModuleNotFoundError") {
		t.Skipf("%s lacks a module:\n%s", py, out)
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(files) {
		t.Fatalf("%d reports for %d files:\n%s", len(lines), len(files), out)
	}
	for i, line := range lines {
		var c twinCheck
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("%s: %v", files[i], err)
		}
		n := len(req[i].Tensors) - 1
		if len(c.Mismatched) != 1 || !strings.HasSuffix(c.Mismatched[0], shiftedSuffix) {
			t.Errorf("%s: these differ from the gguf package's dequantization: %v; want only the one read shifted", files[i], c.Mismatched)
		}
		c.Mismatched = slices.DeleteFunc(c.Mismatched, func(s string) bool { return strings.HasSuffix(s, shiftedSuffix) })
		t.Logf("%s: the gguf package dequantizes its %d tensors (types %v, the shifted one counted) to the twin's values bit for bit, but for %d (and tells a twin read one value off)",
			filepath.Base(files[i]), n, c.Types, len(c.Mismatched))
		if c.Tensors != n+1 {
			t.Errorf("%s: %d tensors checked of %d", files[i], c.Tensors, n+1)
		}
	}
}

// llamaCppGap is the largest |Δ log-probability| between two llama.cpp
// reports over each one's top llamaCppTop tokens at the positions where
// both ran the same sequence (the prompt's, then the decoded tokens while
// the two agree), and how many such positions there are. A token of one
// side's top missing from the other's reported top counts as a gap of
// that side's log-probability less the other's lowest reported one (a
// lower bound).
func llamaCppGap(a, b llamaCppReport, prompt int) (gap float64, positions int) {
	positions = prompt
	for s := 0; s < llamaCppSteps-1 && a.Generated[s] == b.Generated[s]; s++ {
		positions++
	}
	positions = min(positions, len(a.Positions), len(b.Positions))
	for p := range positions {
		for _, pair := range [2][2][][2]float64{{a.Positions[p], b.Positions[p]}, {b.Positions[p], a.Positions[p]}} {
			mine, theirs := pair[0], pair[1]
			other := map[int]float64{}
			for _, e := range theirs {
				other[int(e[0])] = e[1]
			}
			for j, e := range mine {
				if j == llamaCppTop {
					break
				}
				lp, ok := other[int(e[0])]
				if !ok {
					lp = theirs[len(theirs)-1][1]
				}
				gap = max(gap, math.Abs(e[1]-lp))
			}
		}
	}
	return gap, positions
}
