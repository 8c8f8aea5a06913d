package gguf

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"fusion/internal/testenv"
)

// runPython runs testdata/script with args under the reference venv,
// skipping (or failing under make test) when it is missing.
func runPython(t *testing.T, script string, args ...string) []byte {
	t.Helper()
	py := testenv.Python(t)
	cmd := exec.Command(py, append([]string{filepath.Join("testdata", script)}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("%s %s: %v\n%s", script, args, err, stderr)
	}
	return out
}

// refJob is one entry of quants_ref.py's manifest.
type refJob struct {
	Op   string `json:"op"`
	Type string `json:"type"`
	Rows int    `json:"rows"`
	Cols int    `json:"cols"`
	In   string `json:"in"`
	Out  string `json:"out"`
}

func writeManifest(t *testing.T, dir string, jobs []refJob) {
	t.Helper()
	b, err := json.Marshal(jobs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func f32Bytes(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func bytesF32(b []byte) []float32 {
	x := make([]float32, len(b)/4)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return x
}

// randomF16 returns a random finite half-precision bit pattern (normal,
// subnormal or zero, either sign).
func randomF16(r *rand.Rand) uint16 {
	h := uint16(r.Uint32())
	if h&0x7c00 == 0x7c00 {
		h &^= uint16(r.IntN(31)+1) << 10 // clear some exponent bits
	}
	return h
}

// gaussian returns n normally distributed values with the given scale.
func gaussian(r *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * scale)
	}
	return x
}
