package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fusion/engine/demo"
)

// TestModelsQuantizeGGUFSource: SRC may be a float GGUF file, whose MLX
// output is what its safetensors original gives; a quantized GGUF is
// refused with the reason.
func TestModelsQuantizeGGUFSource(t *testing.T) {
	dir := t.TempDir()
	o := demo.Options{Seed: 9, DType: "f16"}
	if _, err := demo.Create(filepath.Join(dir, "src"), o); err != nil {
		t.Fatal(err)
	}
	o.Format = demo.FormatGGUF
	for _, layout := range []string{"f16", "q8_0"} {
		o.GGUFType = layout
		if _, err := demo.Create(filepath.Join(dir, layout+".gguf"), o); err != nil {
			t.Fatal(err)
		}
	}
	var out, errb bytes.Buffer
	for _, src := range []string{"src", "f16.gguf"} {
		if code := run(context.Background(), []string{"models", "quantize", "--bits", "4", filepath.Join(dir, src), filepath.Join(dir, src+"-q4")}, &out, &errb); code != 0 {
			t.Fatalf("%s: exit %d: %s", src, code, errb.String())
		}
	}
	a, _ := os.ReadFile(filepath.Join(dir, "src-q4", "model.safetensors"))
	b, _ := os.ReadFile(filepath.Join(dir, "f16.gguf-q4", "model.safetensors"))
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Error("the weights quantized from the F16 GGUF differ from those from its safetensors original")
	}
	errb.Reset()
	if code := run(context.Background(), []string{"models", "quantize", filepath.Join(dir, "q8_0.gguf"), filepath.Join(dir, "again")}, &out, &errb); code == 0 ||
		!strings.Contains(errb.String(), "re-quantizing a quantized model loses accuracy") {
		t.Errorf("a Q8_0 GGUF: exit %d: %s", code, errb.String())
	}
}
