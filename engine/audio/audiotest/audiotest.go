// Package audiotest holds what the audio and ct2 tests share: the Python
// with a given set of reference modules, and float32 sample files in the
// little-endian layout numpy's "<f4" reads and writes.
package audiotest

import (
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"

	"fusion/internal/testenv"
)

// Python returns the reference interpreter after checking it imports
// modules; without them the test fails under FUSION_REQUIRE_FIXTURES=1
// (make test installs them) and skips otherwise.
func Python(t testing.TB, modules ...string) string {
	t.Helper()
	py := testenv.Python(t)
	if len(modules) == 0 {
		return py
	}
	if out, err := exec.Command(py, "-c", "import "+strings.Join(modules, ", ")).CombinedOutput(); err != nil {
		if testenv.Required() {
			t.Fatalf("%s cannot import %v (scripts/requirements-test.txt): %v\n%s", py, modules, err, out)
		}
		t.Skipf("%s cannot import %v: %v", py, modules, err)
	}
	return py
}

// F32Bytes encodes samples as little-endian float32.
func F32Bytes(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[i*4:], math.Float32bits(v))
	}
	return b
}

// F32s decodes little-endian float32 samples (a trailing partial sample
// is ignored).
func F32s(b []byte) []float32 {
	x := make([]float32, len(b)/4)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[i*4:]))
	}
	return x
}

// WriteF32 writes samples to path as little-endian float32.
func WriteF32(t testing.TB, path string, x []float32) {
	t.Helper()
	if err := os.WriteFile(path, F32Bytes(x), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ReadF32 reads a little-endian float32 file.
func ReadF32(t testing.TB, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return F32s(b)
}
