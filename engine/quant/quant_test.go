package quant

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"fusion/engine/demo"
	"fusion/internal/testenv"
)

func demoDir(t *testing.T, o demo.Options) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "m")
	if _, err := demo.Create(dir, o); err != nil {
		t.Fatal(err)
	}
	return dir
}

func quantBlock(t *testing.T, dir string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	q, _ := c["quantization"].(map[string]any)
	return q
}

// TestUniformMatchesDemo: quantizing a float demo model gives exactly the
// weights create-demo writes quantized from the same seed (which
// TestMLXLMAgrees in engine/demo shows equal to mlx_lm.convert's).
func TestUniformMatchesDemo(t *testing.T) {
	for _, o := range []demo.Options{
		{Quantize: 4, GroupSize: 64},
		{Arch: "llama", Quantize: 8, GroupSize: 32, Untied: true, Seed: 7},
		{Quantize: 3, GroupSize: 128, DType: "f16", Hidden: 128, Intermediate: 256},
		{Arch: "mistral", Quantize: 2, GroupSize: 32, DType: "f32", Seed: 3},
		{Arch: "phi3", Quantize: 5, GroupSize: 64, Seed: 4},
	} {
		float := o
		float.Quantize, float.GroupSize = 0, 0
		src, want := demoDir(t, float), demoDir(t, o)
		dst := filepath.Join(t.TempDir(), "q")
		var steps []int
		res, err := Quantize(context.Background(), src, dst, Options{Bits: o.Quantize, GroupSize: o.GroupSize,
			Progress: func(done, total int) { steps = append(steps, done) }})
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		a, _ := os.ReadFile(filepath.Join(dst, "model.safetensors"))
		b, _ := os.ReadFile(filepath.Join(want, "model.safetensors"))
		if !bytes.Equal(a, b) {
			t.Errorf("%+v: weights differ from create-demo's (%d vs %d bytes)", o, len(a), len(b))
		}
		if got, want := quantBlock(t, dst), quantBlock(t, want); !jsonEqual(got, want) {
			t.Errorf("%+v: quantization %v, want %v", o, got, want)
		}
		if res.Quantized == 0 || res.Raised != 0 || res.AvgBits != float64(o.Quantize) || len(steps) != res.Tensors {
			t.Errorf("%+v: result %+v, %d progress steps", o, res, len(steps))
		}
		if _, err := os.Stat(filepath.Join(dst, "tokenizer.json")); err != nil {
			t.Errorf("tokenizer not copied: %v", err)
		}
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func TestQuantizeRefuses(t *testing.T) {
	src := demoDir(t, demo.Options{})
	quantized := demoDir(t, demo.Options{Quantize: 4, GroupSize: 64})
	exists := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name, src, dst string
		o              Options
		ctx            context.Context
		want           error
	}{
		{"bits", src, "", Options{Bits: 7}, nil, ErrBadOptions},
		{"group", src, "", Options{GroupSize: 48}, nil, ErrBadOptions},
		{"target below bits", src, "", Options{Bits: 4, TargetBits: 3.5}, nil, ErrBadOptions},
		{"target above high", src, "", Options{Bits: 4, TargetBits: 9.5}, nil, ErrBadOptions},
		// bf16 scales: 8-bit in groups of 64 is 8.5 bits per weight.
		{"target above the dearest plan", src, "", Options{Bits: 4, TargetBits: 8.75}, nil, ErrBadOptions},
		{"widths without target", src, "", Options{Widths: []int{2, 4}}, nil, ErrBadOptions},
		{"bad width", src, "", Options{TargetBits: 5, Widths: []int{4, 7}}, nil, ErrBadOptions},
		{"bad group size", src, "", Options{TargetBits: 5, GroupSizes: []int{64, 48}}, nil, ErrBadOptions},
		{"already quantized", quantized, "", Options{}, nil, ErrUnsupported},
		{"exists", src, exists, Options{}, nil, ErrExists},
		{"cancelled", src, "", Options{}, ctx, context.Canceled},
		{"calibration without target", src, "", Options{Calibration: "Some text."}, nil, ErrBadOptions},
		{"calibration window", src, "", Options{TargetBits: 4.5, Calibration: "Some text.", CalibrationWindow: -1}, nil, ErrBadOptions},
		{"calibration too short", src, "", Options{TargetBits: 4.5, Calibration: " "}, nil, ErrBadOptions},
		{"cancelled calibration", src, "", Options{TargetBits: 4.5, Calibration: CalibrationText}, ctx, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := tc.dst
			if dst == "" {
				dst = filepath.Join(t.TempDir(), "out")
			}
			c := tc.ctx
			if c == nil {
				c = context.Background()
			}
			_, err := Quantize(c, tc.src, dst, tc.o)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if tc.dst == "" {
				if _, serr := os.Stat(dst); !os.IsNotExist(serr) {
					t.Errorf("%s left behind", dst)
				}
				ents, _ := os.ReadDir(filepath.Dir(dst))
				if len(ents) != 0 {
					t.Errorf("staging left behind: %v", ents)
				}
			}
		})
	}
}

// TestMixedBeatsUniform: at 5 true bits per weight (bf16 scales: 4-bit
// in groups of 64 is 4.5), the two-width plan's model is closer to the
// float source on a text than uniform 4-bit (perplexity delta), at a
// bits-per-weight cost stated in the result.
func TestMixedBeatsUniform(t *testing.T) {
	src := demoDir(t, demo.Options{Hidden: 128, Intermediate: 256, Layers: 2, Seed: 11})
	ctx := context.Background()
	uni, mixed := filepath.Join(t.TempDir(), "u"), filepath.Join(t.TempDir(), "m")
	if _, err := Quantize(ctx, src, uni, Options{Bits: 4, GroupSize: 64}); err != nil {
		t.Fatal(err)
	}
	res, err := Quantize(ctx, src, mixed, Options{Bits: 4, GroupSize: 64, TargetBits: 5})
	if err != nil {
		t.Fatal(err)
	}
	if res.Raised == 0 || res.BitsPerWeight > 5 || res.BitsPerWeight <= 4.5 || res.AvgBits <= 4 || res.Widths["8/64"] != res.Raised {
		t.Fatalf("plan %+v", res)
	}
	q := quantBlock(t, mixed)
	if len(q) != 3+res.Raised {
		t.Errorf("quantization block has %d entries for %d raised tensors: %v", len(q), res.Raised, q)
	}
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. One, two, three, four. ", 8)
	f, err := Perplexity(ctx, src, text, 0)
	if err != nil {
		t.Fatal(err)
	}
	u, err := Perplexity(ctx, uni, text, 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Perplexity(ctx, mixed, text, 0)
	if err != nil {
		t.Fatal(err)
	}
	du, dm := abs(u.NLL-f.NLL), abs(m.NLL-f.NLL)
	t.Logf("float ppl %.4f; uniform 4-bit %.4f (Δnll %.5f); mixed %.3f bits %.4f (Δnll %.5f), %d of %d tensors at 8 bits",
		f.Perplexity, u.Perplexity, du, res.AvgBits, m.Perplexity, dm, res.Raised, res.Quantized)
	if dm >= du {
		t.Errorf("mixed Δnll %.6f is not below uniform's %.6f", dm, du)
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestMLXLMConvertParity: mlx_lm.convert -q of a float demo model writes
// the same tensors as Quantize, each one's bytes equal (dtype, shape and
// data), the same file metadata, weight map and quantization block. The
// whole files differ only in layout: MLX writes tensors in its hash
// map's order (libstdc++'s here, libc++'s on a Mac), so both are re-saved
// through MLX's writer from sorted dicts and those copies compared byte
// for byte. One Python process runs every case (importing mlx-lm is slow).
func TestMLXLMConvertParity(t *testing.T) {
	py := testenv.Python(t)
	args := []string{"-c", `import sys, json
import mlx.core as mx
from mlx_lm import convert
from safetensors import safe_open
def tensors(path):
    out = {}
    with safe_open(path, framework="numpy") as f:
        md = f.metadata()
    # raw bytes of each tensor, read from the header's offsets
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    hdr = json.loads(raw[8:8 + n])
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = (v["dtype"], v["shape"], raw[8 + n + a:8 + n + b])
    return md, out
def resave(path, dst):
    w = mx.load(path)
    mx.save_safetensors(dst, {k: w[k] for k in sorted(w)}, metadata={"format": "mlx"})
    return open(dst, "rb").read()
it = iter(sys.argv[1:])
for src, ours, conv, bits, group in zip(it, it, it, it, it):
    convert(src, mlx_path=conv, quantize=True, q_bits=int(bits), q_group_size=int(group))
    mo, to = tensors(ours + "/model.safetensors")
    mt, tt = tensors(conv + "/model.safetensors")
    assert mo == mt, (mo, mt)
    assert sorted(to) == sorted(tt), (sorted(to), sorted(tt))
    for k in tt:
        assert to[k] == tt[k], (src, k, to[k][:2], tt[k][:2])
    assert resave(ours + "/model.safetensors", ours + "/r.safetensors") == resave(conv + "/model.safetensors", conv + "/r.safetensors"), src
    a, b = json.load(open(ours + "/config.json")), json.load(open(conv + "/config.json"))
    assert a["quantization"] == b["quantization"], (a["quantization"], b["quantization"])
    assert a["quantization_config"] == b["quantization_config"]
    ia, ib = json.load(open(ours + "/model.safetensors.index.json")), json.load(open(conv + "/model.safetensors.index.json"))
    assert ia["weight_map"] == ib["weight_map"] and ia["metadata"]["total_size"] == ib["metadata"]["total_size"]
    print(src, len(tt), "tensors equal")
print("ok")
`}
	for _, c := range []struct {
		o         demo.Options
		bits, grp int
	}{
		{demo.Options{}, 4, 64},
		{demo.Options{Arch: "llama", Untied: true, Seed: 7}, 8, 32},
		{demo.Options{DType: "f16", Hidden: 128, Intermediate: 256}, 3, 128},
		{demo.Options{Arch: "phi3", Seed: 3}, 6, 64},
		{demo.Options{Arch: "mistral", DType: "f32", Seed: 4}, 2, 32},
		{demo.Options{Seed: 5}, 5, 32},
	} {
		src := demoDir(t, c.o)
		dst := filepath.Join(t.TempDir(), "ours")
		if _, err := Quantize(context.Background(), src, dst, Options{Bits: c.bits, GroupSize: c.grp}); err != nil {
			t.Fatal(err)
		}
		args = append(args, src, dst, filepath.Join(t.TempDir(), "theirs"), strconv.Itoa(c.bits), strconv.Itoa(c.grp))
	}
	out, err := exec.Command(py, args...).CombinedOutput()
	if err != nil && !testenv.Required() && strings.Contains(string(out), "ModuleNotFoundError") {
		t.Skipf("%s lacks a module:\n%s", py, out)
	}
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "ok") {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("%s", out)
}
