package safetensors

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"fusion/engine/tensor"
	"fusion/internal/testenv"
)

// TestMatchesPythonLibrary writes a file with Write and has the Python
// safetensors library (with numpy) read it and write the same tensors
// again: the bytes must be identical. It skips when that Python has no
// safetensors/numpy (they are not in scripts/requirements-test.txt).
func TestMatchesPythonLibrary(t *testing.T) {
	py := testenv.Python(t)
	if err := exec.Command(py, "-c", "import safetensors.numpy, numpy").Run(); err != nil {
		t.Skipf("%s has no safetensors/numpy: %v", py, err)
	}
	var ts []tensor.Tensor
	for _, tn := range sampleTensors() {
		if tn.DType != tensor.BF16 { // numpy has no bfloat16
			ts = append(ts, tn)
		}
	}
	ts = append(ts, tensor.Tensor{Name: "u16", DType: tensor.U16, Shape: []int64{2}, Data: []byte{1, 2, 3, 4}},
		tensor.Tensor{Name: "i8", DType: tensor.I8, Shape: []int64{1}, Data: []byte{0x80}})
	SortLikePython(ts)
	dir := t.TempDir()
	ours := filepath.Join(dir, "ours.safetensors")
	if err := WriteFile(ours, ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(dir, "theirs.safetensors")
	script := `import sys, safetensors.numpy as sn
from safetensors import safe_open
with safe_open(sys.argv[1], framework="numpy") as f:
    md = f.metadata()
tensors = sn.load_file(sys.argv[1])
sn.save_file(tensors, sys.argv[2], metadata=md)
`
	out, err := exec.Command(py, "-c", script, ours, theirs).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	a, _ := os.ReadFile(ours)
	b, err := os.ReadFile(theirs)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatalf("bytes differ:\nours   %q\ntheirs %q", a[:min(len(a), 400)], b[:min(len(b), 400)])
	}
}
