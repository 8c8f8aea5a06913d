package demo

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"fusion/internal/testenv"
)

// pythonWith returns the test Python if it can import every module (all
// in scripts/requirements-test.txt); without them it fails under
// FUSION_REQUIRE_FIXTURES=1, as testenv does for a missing fixture, and
// skips otherwise.
func pythonWith(t *testing.T, modules ...string) string {
	t.Helper()
	py := testenv.Python(t)
	if out, err := exec.Command(py, "-c", "import "+strings.Join(modules, ", ")).CombinedOutput(); err != nil {
		msg := fmt.Sprintf("%s cannot import %s: %v\n%s", py, strings.Join(modules, ", "), err, out)
		if testenv.Required() {
			t.Fatal(msg)
		}
		t.Skip(msg + " (run `make test`, which installs them)")
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

// TestMLXLMAgrees: mlx_lm.convert -q of our float demo writes exactly our
// quantized demo (same seed): every tensor's name, dtype, shape and bytes,
// and the quantization block (the routers' 8-bit overrides included) —
// for every family the demo writes as safetensors: dense models in affine
// 4 and 8 bits, the mixtures (qwen3_moe's stacked experts, gpt_oss's
// biased ones in its shipping mxfp4, deepseek_v3's MLA and shared
// expert, glm4_moe), the Gated DeltaNet hybrids (qwen3_5's small
// in_proj_b/in_proj_a, quantized too, in 4-bit and mxfp8; qwen3_5_moe in
// mxfp4, qwen3_next in mxfp8), phi3's fused projections, the mistral
// families, and the Gemmas text-only and multimodal (gemma4's per-layer
// embedding; the vision towers, which mlx-lm drops and we keep, byte for
// byte the float demo's); MLX's four modes among them. mlx-lm then loads
// and runs each of ours. One Python process (importing mlx-lm is slow)
// does every case.
func TestMLXLMAgrees(t *testing.T) {
	py := pythonWith(t, "mlx.core", "mlx_lm", "numpy")
	args := []string{"-c", `import sys, json, numpy as np, mlx.core as mx
from mlx_lm import convert, load
# The parity reference's import patches gather_qmm for mlx-lm 0.32.2 on
# this mlx-cpu wheel (its global_scale keyword), which running a
# quantized mixture needs.
sys.path.insert(0, "../model/testdata")
import mlx_logits
it = iter(sys.argv[1:])
for fdir, qdir, conv, mode, bits, group in zip(it, it, it, it, it, it):
    kw = {"q_mode": mode}
    if mode == "affine":
        kw.update(q_bits=int(bits), q_group_size=int(group))
    convert(fdir, mlx_path=conv, quantize=True, **kw)
    ours, theirs = mx.load(qdir + "/model.safetensors"), mx.load(conv + "/model.safetensors")
    qc, tc = json.load(open(qdir + "/config.json")), json.load(open(conv + "/config.json"))
    # mlx-lm's multimodal models drop the vision tower on load (convert
    # writes the text model alone); ours keeps it, the float demo's
    # tensors unquantized.
    vision = {k for k in ours if k.startswith(("vision_tower.", "multi_modal_projector.", "embed_vision."))}
    assert bool(vision) == ("vision_config" in qc), (qdir, sorted(vision))
    assert sorted(ours) == sorted(set(theirs) | vision), (qdir, sorted(set(ours) ^ set(theirs) ^ vision))
    floats = mx.load(fdir + "/model.safetensors")
    for k in ours:
        a, b = ours[k], theirs.get(k, floats.get(k))
        assert b is not None, (qdir, k, "is no tensor of the float demo")
        assert a.dtype == b.dtype and a.shape == b.shape, (qdir, k, a.dtype, b.dtype, a.shape, b.shape)
        if a.dtype == mx.bfloat16:
            a, b = a.view(mx.uint16), b.view(mx.uint16)
        assert np.array_equal(np.array(a), np.array(b)), (qdir, k)
    assert qc["quantization"] == tc["quantization"], (qdir, qc["quantization"], tc["quantization"])
    assert qc["quantization_config"] == tc["quantization_config"], qdir
    model, tok = load(qdir)
    logits = model(mx.array([tok.encode("Hello, world")]))
    assert logits.shape[-1] == qc.get("vocab_size", qc.get("text_config", {}).get("vocab_size")) and bool(mx.all(mx.isfinite(logits))), qdir
    also = f" (and {len(vision)} vision tensors the float demo's)" if vision else ""
    print(f"{qdir.split('/')[-1]}: {len(theirs)} tensors equal{also}", flush=True)
print("ok")
`}
	moe := Options{Arch: "qwen3_moe", Hidden: 128, Seed: 3}
	oss := Options{Arch: "gpt_oss", Hidden: 128, Seed: 4}
	ds := Options{Arch: "deepseek_v3", Hidden: 128, Seed: 5}
	// Four layers: three DeltaNet, one attention.
	q35 := Options{Arch: "qwen3_5", Layers: 4, Hidden: 128, Seed: 6}
	q35moe := Options{Arch: "qwen3_5_moe", Layers: 4, Hidden: 128, Seed: 8}
	// mlx-lm's gemma3_text wants a full layer among the first
	// sliding_window_pattern.
	gemma3 := Options{Arch: "gemma3_text", Hidden: 128, SlidingPattern: 2, Seed: 15}
	gemma3mm := gemma3
	gemma3mm.Multimodal, gemma3mm.Seed = true, 16
	gemma4 := Options{Arch: "gemma4_text", Layers: 4, Hidden: 128, HeadDim: 32, Experts: 8, Seed: 17}
	gemma4mm := gemma4
	gemma4mm.Multimodal, gemma4mm.Seed = true, 18
	affine := func(o Options, bits, group int) Options { o.Quantize, o.GroupSize = bits, group; return o }
	fp := func(o Options, mode string) Options { o.QuantMode = mode; return o }
	for i, o := range []Options{
		affine(Options{}, 4, 64),
		affine(Options{Arch: "llama", Untied: true, Seed: 7}, 8, 32),
		affine(moe, 4, 64),
		fp(oss, "mxfp4"),
		affine(ds, 4, 64),
		affine(q35, 4, 64),
		fp(q35, "mxfp8"),
		fp(q35moe, "mxfp4"),
		// The other families, each in one mode: the fused qkv_proj and
		// gate_up_proj, the multimodal wrappers (mistral3, ministral3 and
		// --multimodal Gemmas) whose text weights are quantized under
		// "language_model." and whose vision tower stays float, GLM's
		// float MoEGate, Qwen3-Next's 8-bit router and shared-expert gate,
		// Gemma 4's per-layer embedding and 8-bit router.proj.
		affine(Options{Arch: "phi3", Hidden: 128, Seed: 9}, 8, 32),
		affine(Options{Arch: "mistral", Hidden: 128, SlidingWindow: 64, SlidingPattern: 2, Seed: 10}, 4, 64),
		affine(Options{Arch: "mistral3", Hidden: 128, Seed: 11}, 4, 64),
		fp(Options{Arch: "ministral3", Hidden: 128, Seed: 12}, "nvfp4"),
		fp(Options{Arch: "glm4_moe", Hidden: 128, Seed: 13}, "mxfp4"),
		fp(Options{Arch: "qwen3_next", Layers: 4, Hidden: 128, Seed: 14}, "mxfp8"),
		affine(gemma3, 4, 64),
		affine(gemma3mm, 8, 64),
		affine(gemma4, 4, 64),
		fp(gemma4mm, "mxfp4"),
	} {
		float := o
		float.Quantize, float.GroupSize, float.QuantMode = 0, 0, ""
		fdir, _ := writeDemo(t, float)
		qdir := filepath.Join(t.TempDir(), fmt.Sprintf("%d-%s%s-%s", i, cmp.Or(o.Arch, "qwen3"), map[bool]string{true: "-multimodal"}[o.Multimodal], cmp.Or(o.QuantMode, "affine")))
		m, err := Create(qdir, o)
		if err != nil {
			t.Fatal(err)
		}
		mo := m.Options // the mode's bits and group filled in
		args = append(args, fdir, qdir, filepath.Join(t.TempDir(), "converted"), mo.QuantMode, strconv.Itoa(mo.Quantize), strconv.Itoa(mo.GroupSize))
	}
	out, err := exec.Command(py, args...).CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "ok") {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("%s", out)
}
