package demo

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"fusion/internal/testenv"
)

// pythonWith returns the test Python if it can import every module, and
// skips otherwise: numpy, safetensors and mlx-lm are not in
// scripts/requirements-test.txt (point FUSION_PYTHON at a Python that has
// them to run these checks).
func pythonWith(t *testing.T, modules ...string) string {
	t.Helper()
	py := testenv.Python(t)
	if err := exec.Command(py, "-c", "import "+strings.Join(modules, ", ")).Run(); err != nil {
		t.Skipf("%s cannot import %s", py, strings.Join(modules, ", "))
	}
	return py
}

// TestSafetensorsMatchPython: the Python library reads a float demo model
// and writes the same tensors back byte for byte.
func TestSafetensorsMatchPython(t *testing.T) {
	py := pythonWith(t, "numpy", "safetensors.numpy")
	for _, dt := range []string{"f32", "f16"} {
		dir, _ := writeDemo(t, Options{DType: dt, Untied: true})
		ours := filepath.Join(dir, "model.safetensors")
		theirs := filepath.Join(t.TempDir(), "resaved.safetensors")
		out, err := exec.Command(py, "-c", `import sys, safetensors.numpy as sn
from safetensors import safe_open
with safe_open(sys.argv[1], framework="numpy") as f:
    md = f.metadata()
sn.save_file(sn.load_file(sys.argv[1]), sys.argv[2], metadata=md)
`, ours, theirs).CombinedOutput()
		if err != nil {
			t.Fatalf("python: %v\n%s", err, out)
		}
		a, _ := os.ReadFile(ours)
		b, _ := os.ReadFile(theirs)
		if !bytes.Equal(a, b) {
			t.Errorf("%s: our file differs from what the Python library writes", dt)
		}
	}
}

// TestMLXLMAgrees: mlx-lm quantizes our float demo into exactly our
// quantized demo (same seed), and loads and runs both.
func TestMLXLMAgrees(t *testing.T) {
	py := pythonWith(t, "mlx.core", "mlx_lm", "numpy")
	for _, o := range []Options{{Quantize: 4, GroupSize: 64}, {Arch: "llama", Quantize: 8, GroupSize: 32, Untied: true, Seed: 7}} {
		float := o
		float.Quantize, float.GroupSize = 0, 0
		fdir, _ := writeDemo(t, float)
		qdir, _ := writeDemo(t, o)
		conv := filepath.Join(t.TempDir(), "converted")
		out, err := exec.Command(py, "-c", `import sys, json, numpy as np, mlx.core as mx
from mlx_lm import convert, load
fdir, qdir, conv, bits, group = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
convert(fdir, mlx_path=conv, quantize=True, q_bits=bits, q_group_size=group)
ours, theirs = mx.load(qdir + "/model.safetensors"), mx.load(conv + "/model.safetensors")
assert sorted(ours) == sorted(theirs), (sorted(ours), sorted(theirs))
for k in theirs:
    a, b = ours[k], theirs[k]
    assert a.dtype == b.dtype and a.shape == b.shape, (k, a.dtype, b.dtype, a.shape, b.shape)
    if a.dtype == mx.bfloat16:
        a, b = a.view(mx.uint16), b.view(mx.uint16)
    assert np.array_equal(np.array(a), np.array(b)), k
qc, tc = json.load(open(qdir + "/config.json")), json.load(open(conv + "/config.json"))
assert qc["quantization"] == tc["quantization"], (qc["quantization"], tc["quantization"])
for d in (fdir, qdir):
    model, tok = load(d)
    logits = model(mx.array([tok.encode("Hello, world")]))
    assert logits.shape[-1] == qc["vocab_size"] and bool(mx.all(mx.isfinite(logits)))
print("ok")
`, fdir, qdir, conv, strconv.Itoa(o.Quantize), strconv.Itoa(o.GroupSize)).CombinedOutput()
		if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "ok") {
			t.Fatalf("%+v: %v\n%s", o, err, out)
		}
	}
}
