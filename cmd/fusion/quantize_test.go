package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"fusion/engine/demo"
)

// TestModelsQuantize: `fusion models quantize SRC DST` writes the
// quantized model create-demo writes from the same seed, and reports it;
// bad flags are usage errors.
func TestModelsQuantize(t *testing.T) {
	src, want := filepath.Join(t.TempDir(), "src"), filepath.Join(t.TempDir(), "want")
	if _, err := demo.Create(src, demo.Options{Seed: 9}); err != nil {
		t.Fatal(err)
	}
	if _, err := demo.Create(want, demo.Options{Seed: 9, Quantize: 8, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"models", "quantize", "--bits", "8", "--group-size", "32", "--evaluate", src, dst}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	a, _ := os.ReadFile(filepath.Join(dst, "model.safetensors"))
	b, _ := os.ReadFile(filepath.Join(want, "model.safetensors"))
	if !bytes.Equal(a, b) {
		t.Error("the weights differ from create-demo's")
	}
	var rep struct {
		Result struct {
			Bits      int `json:"bits"`
			Quantized int `json:"quantized"`
		} `json:"result"`
		Delta *float64 `json:"perplexity_delta"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.Result.Bits != 8 || rep.Result.Quantized == 0 || rep.Delta == nil {
		t.Errorf("report %s: %v", out.String(), err)
	}
	// GGUF: one file, DST.gguf.
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"models", "quantize", "--format", "gguf", "--type", "Q8_0", src, dst + "-g"}, &out, &errb); code != 0 {
		t.Fatalf("gguf: exit %d: %s", code, errb.String())
	}
	var g struct {
		Result struct {
			Dir  string `json:"dir"`
			Type string `json:"type"`
		} `json:"result"`
	}
	if err := json.Unmarshal(out.Bytes(), &g); err != nil || g.Result.Type != "Q8_0" || g.Result.Dir != dst+"-g.gguf" {
		t.Errorf("gguf report %s: %v", out.String(), err)
	}
	if _, err := os.Stat(dst + "-g.gguf"); err != nil {
		t.Error(err)
	}
	// A calibrated mixed plan on a text file: every quantized tensor's
	// bits and measured divergence in the report.
	calib := filepath.Join(t.TempDir(), "calib.txt")
	if err := os.WriteFile(calib, []byte("A short calibration text. It has a few sentences, and the model reads them once."), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"models", "quantize", "--target-bits", "4.5", "--calibration", calib, src, dst + "-m"}, &out, &errb); code != 0 {
		t.Fatalf("calibrated: exit %d: %s", code, errb.String())
	}
	var m struct {
		Result struct {
			Sensitivity string `json:"sensitivity"`
			Quantized   int    `json:"quantized"`
			Plan        []struct {
				Bits   int     `json:"bits"`
				BaseKL float64 `json:"base_kl"`
			} `json:"plan"`
		} `json:"result"`
	}
	if err := json.Unmarshal(out.Bytes(), &m); err != nil || m.Result.Sensitivity != "calibration" || len(m.Result.Plan) != m.Result.Quantized || m.Result.Plan[0].BaseKL <= 0 {
		t.Errorf("calibrated report %s: %v", out.String(), err)
	}
	// A plan over several widths and group sizes (the weight measure):
	// every tensor's candidates in the report, within the target.
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"models", "quantize", "--target-bits", "4.5", "--widths", "2,3,4,6", "--group-sizes", "32,64", src, dst + "-w"}, &out, &errb); code != 0 {
		t.Fatalf("widths: exit %d: %s", code, errb.String())
	}
	var w struct {
		Result struct {
			BitsPerWeight float64        `json:"bits_per_weight"`
			Widths        map[string]int `json:"widths"`
			Plan          []struct {
				Candidates []json.RawMessage `json:"candidates"`
			} `json:"plan"`
		} `json:"result"`
	}
	if err := json.Unmarshal(out.Bytes(), &w); err != nil || w.Result.BitsPerWeight > 4.5 || len(w.Result.Widths) == 0 || len(w.Result.Plan) == 0 || len(w.Result.Plan[0].Candidates) != 8 {
		t.Errorf("widths report %s: %v", out.String(), err)
	}
	for _, args := range [][]string{{"--target-bits", "4.5", "--widths", "4,7", src, dst + "9"}, {"--target-bits", "4.5", "--widths", "four", src, dst + "10"},
		{"--addr", "http://127.0.0.1:1", "--target-bits", "4.5", "--group-sizes", "64,128", "demo"}} {
		out.Reset()
		errb.Reset()
		if code := run(context.Background(), append([]string{"models", "quantize"}, args...), &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
	for _, args := range [][]string{{"--bits", "7", src, dst + "2"}, {src}, {"--target-bits", "3", src, dst + "3"},
		{"--calibrate", src, dst + "7"}, {"--target-bits", "4.5", "--calibration", calib + ".missing", src, dst + "8"},
		{"--format", "gguf", "--type", "Q4_K_S", src, dst + "4"}, {"--type", "Q8_0", src, dst + "5"}, {"--format", "onnx", src, dst + "6"}} {
		out.Reset()
		errb.Reset()
		if code := run(context.Background(), append([]string{"models", "quantize"}, args...), &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
}
