package quant

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"fusion/engine/demo"
	"fusion/engine/gguf"
	"fusion/internal/testenv"
)

// ggufDemo writes the demo of o as a GGUF file of layout typ and returns
// its path (named m.gguf, so the model's name is the safetensors demo's).
func ggufDemo(t *testing.T, o demo.Options, typ string) string {
	t.Helper()
	o.Format, o.GGUFType = demo.FormatGGUF, typ
	path := demo.GGUFPath(filepath.Join(t.TempDir(), "m"))
	if _, err := demo.Create(path, o); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestGGUFSourceRoundTrip: a float safetensors model written as an F16
// GGUF (create-demo's writer: llama.cpp's names, metadata, tokenizer
// keys, llama's Q/K rows permuted) and quantized from that file gives
// the same output as quantized from the safetensors: the MLX weights bit
// for bit (so the names are mapped back and the rows un-permuted), the
// same quantization block, a tokenizer that encodes alike (the same
// perplexity, checked on llama: its BOS and pre-tokenizer), and for a GGUF output the same tensors and metadata. No
// staging directory is left behind.
func TestGGUFSourceRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    demo.Options
		out  Options
	}{
		{"llama untied 4-bit", demo.Options{Arch: "llama", DType: "f16", Untied: true, Seed: 5}, Options{Bits: 4, GroupSize: 64}},
		{"qwen3 tied 3-bit g32", demo.Options{DType: "f16", Seed: 6}, Options{Bits: 3, GroupSize: 32}},
		{"qwen3 bf16 8-bit", demo.Options{DType: "bf16", Seed: 7}, Options{Bits: 8, GroupSize: 64}},
		{"llama to Q8_0", demo.Options{Arch: "llama", DType: "f16", Untied: true, Seed: 5}, Options{Format: FormatGGUF, GGUFType: GGUFQ8_0}},
		{"qwen3_moe to Q8_0", demo.Options{Arch: "qwen3_moe", DType: "f16", Experts: 4, ExpertsPerTok: 2, Seed: 8},
			Options{Format: FormatGGUF, GGUFType: GGUFQ8_0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, ggufSrc := demoDir(t, tc.o), ggufDemo(t, tc.o, tc.o.DType)
			if tc.o.Arch == "llama" {
				// create-demo's GGUF has no rope_freqs.weight (its Llama 3
				// scaling): compare with the same model without it.
				dropRopeScaling(t, src)
			}
			if err := CheckSource(ggufSrc); tc.out.Format == "" && err != nil {
				t.Fatalf("CheckSource: %v", err)
			}
			if err := CheckGGUFSource(ggufSrc); tc.out.Format == FormatGGUF && err != nil {
				t.Fatalf("CheckGGUFSource: %v", err)
			}
			outDir := t.TempDir()
			want, err := Quantize(context.Background(), src, filepath.Join(t.TempDir(), "q"), tc.out)
			if err != nil {
				t.Fatal(err)
			}
			var logs []string
			o := tc.out
			o.Log = func(s string) { logs = append(logs, s) }
			got, err := Quantize(context.Background(), ggufSrc, filepath.Join(outDir, "q"), o)
			if err != nil {
				t.Fatal(err)
			}
			if ents, _ := os.ReadDir(outDir); len(ents) != 1 {
				t.Errorf("the destination's directory holds %d entries, want the output alone", len(ents))
			}
			if got.Bytes != want.Bytes || got.BitsPerWeight != want.BitsPerWeight || got.Quantized != want.Quantized || got.Raised != want.Raised {
				t.Errorf("result %+v, want %+v", got, want)
			}
			if !strings.Contains(strings.Join(logs, "\n"), "GGUF source") {
				t.Errorf("log %q does not say it read a GGUF source", logs)
			}
			if tc.out.Format == FormatGGUF {
				compareGGUFFiles(t, got.Dir, want.Dir)
				return
			}
			a, _ := os.ReadFile(filepath.Join(got.Dir, "model.safetensors"))
			b, _ := os.ReadFile(filepath.Join(want.Dir, "model.safetensors"))
			if len(a) == 0 || !bytes.Equal(a, b) {
				t.Errorf("MLX weights from the GGUF differ from those from the safetensors (%d vs %d bytes)", len(a), len(b))
			}
			if g, w := quantBlock(t, got.Dir), quantBlock(t, want.Dir); !jsonEqual(g, w) {
				t.Errorf("quantization %v, want %v", g, w)
			}
			if tc.o.Arch != "llama" {
				return
			}
			ps, err := Perplexity(context.Background(), want.Dir, EvalText, 0)
			if err != nil {
				t.Fatal(err)
			}
			pg, err := Perplexity(context.Background(), got.Dir, EvalText, 0)
			if err != nil {
				t.Fatal(err)
			}
			if pg != ps {
				t.Errorf("perplexity from the GGUF source's output %+v, from the safetensors' %+v", pg, ps)
			}
		})
	}
}

// dropRopeScaling removes rope_scaling from the config.json in dir.
func dropRopeScaling(t *testing.T, dir string) {
	t.Helper()
	path := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	delete(c, "rope_scaling")
	if b, err = json.Marshal(c); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// compareGGUFFiles checks two GGUF files hold the same tensors (names,
// types, shapes, bytes) and the same metadata values.
func compareGGUFFiles(t *testing.T, got, want string) {
	t.Helper()
	a, err := gguf.Open(got, gguf.LoadRead)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := gguf.Open(want, gguf.LoadRead)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if len(a.Tensors) != len(b.Tensors) {
		t.Fatalf("%d tensors, want %d", len(a.Tensors), len(b.Tensors))
	}
	for i, x := range a.Tensors {
		y := b.Tensors[i]
		if x.Name != y.Name || x.DType != y.DType || !jsonEqual(x.Shape, y.Shape) || !bytes.Equal(x.Data, y.Data) {
			t.Errorf("tensor %d: %s %v %v, want %s %v %v (or its bytes differ)", i, x.Name, x.DType, x.Shape, y.Name, y.DType, y.Shape)
		}
	}
	if len(a.KV) != len(b.KV) {
		t.Errorf("%d metadata keys, want %d", len(a.KV), len(b.KV))
	}
	for _, kv := range b.KV {
		if v := a.Meta(kv.Key); v.String() != kv.Value.String() {
			t.Errorf("%s = %.80s, want %.80s", kv.Key, v, kv.Value)
		}
	}
}

// TestGGUFSourceRefused: a quantized GGUF is refused with the reason
// (re-quantizing loses accuracy), by the checks and by Quantize, which
// leaves nothing behind.
func TestGGUFSourceRefused(t *testing.T) {
	for _, typ := range []string{"q4_k_m", "q8_0"} {
		path := ggufDemo(t, demo.Options{Seed: 2}, typ)
		for what, check := range map[string]func(string) error{"CheckSource": CheckSource, "CheckGGUFSource": CheckGGUFSource} {
			if err := check(path); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "re-quantizing a quantized model loses accuracy") {
				t.Errorf("%s %s: %v, want ErrUnsupported saying why", typ, what, err)
			}
		}
		out := t.TempDir()
		for _, o := range []Options{{}, {Format: FormatGGUF, GGUFType: GGUFQ6_K}} {
			if _, err := Quantize(context.Background(), path, filepath.Join(out, "q"), o); !errors.Is(err, ErrUnsupported) {
				t.Errorf("%s %+v: %v, want ErrUnsupported", typ, o, err)
			}
		}
		if ents, _ := os.ReadDir(out); len(ents) != 0 {
			t.Errorf("%s: %d entries left in the destination's directory", typ, len(ents))
		}
	}
	// A cancelled job leaves nothing either.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := t.TempDir()
	if _, err := Quantize(ctx, ggufDemo(t, demo.Options{Seed: 2}, "f16"), filepath.Join(out, "q"), Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("cancelled: %d entries left in the destination's directory", len(ents))
	}
	// An MLX output of a mixture is refused as from safetensors.
	moe := ggufDemo(t, demo.Options{Arch: "qwen3_moe", DType: "f16", Seed: 3}, "f16")
	if err := CheckSource(moe); !errors.Is(err, ErrUnsupported) {
		t.Errorf("MLX output of a qwen3_moe GGUF: %v, want ErrUnsupported", err)
	}
}

// TestGGUFSourceMLXLM: the MLX model oQ writes from an F16 GGUF is a
// complete model for mlx-lm too: mlx_lm.load reads its config.json and
// its tokenizer files (transformers' tokenizer on the synthesised
// tokenizer.json and tokenizer_config.json), which encode a text and a
// chat as those of the safetensors original's output do, and the two
// models' logits on it are equal.
func TestGGUFSourceMLXLM(t *testing.T) {
	py := testenv.Python(t)
	args := []string{"-c", `import sys
import mlx.core as mx
from mlx_lm import load
it = iter(sys.argv[1:])
for a, b in zip(it, it):
    ma, ta = load(a)
    mb, tb = load(b)
    text = "The baker lit his ovens, 12 loaves; cafe\u0301 and \u65e5\u672c."
    ia, ib = ta.encode(text), tb.encode(text)
    assert ia == ib, (ia, ib)
    chat = [{"role": "user", "content": "hi"}]
    ca = ta.apply_chat_template(chat, add_generation_prompt=True)
    cb = tb.apply_chat_template(chat, add_generation_prompt=True)
    assert ca == cb, (ca, cb)
    la, lb = ma(mx.array([ia])), mb(mx.array([ib]))
    assert mx.array_equal(la, lb).item(), float(mx.abs(la - lb).max())
    assert ta.eos_token_id == tb.eos_token_id, (ta.eos_token_id, tb.eos_token_id)
    print(a, len(ia), "tokens, logits equal")
print("ok")`}
	for _, o := range []demo.Options{{Arch: "llama", DType: "f16", Untied: true, Seed: 5}, {DType: "f16", Seed: 6}} {
		src, ggufSrc := demoDir(t, o), ggufDemo(t, o, "f16")
		if o.Arch == "llama" {
			dropRopeScaling(t, src)
		}
		a, b := filepath.Join(t.TempDir(), "from-gguf"), filepath.Join(t.TempDir(), "from-st")
		for _, p := range [][2]string{{ggufSrc, a}, {src, b}} {
			if _, err := Quantize(context.Background(), p[0], p[1], Options{Bits: 4}); err != nil {
				t.Fatal(err)
			}
		}
		args = append(args, a, b)
	}
	out, err := exec.Command(py, args...).CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "ok") {
		t.Fatalf("mlx_lm: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
