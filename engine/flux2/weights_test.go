package flux2

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu"
)

// TestBF16MatchesPipeline: a checkpoint written in bf16 (text encoder,
// transformer and VAE) generates, from a prompt, the packed latents
// Flux2KleinPipeline has after its last step when it loads the same
// files upcast to float32 (within 1e-4 relative), and its PIL image
// within 2/255, on every backend.
func TestBF16MatchesPipeline(t *testing.T) {
	ref := reference(t)
	for _, nb := range testBackends(t) {
		t.Run(nb.name, func(t *testing.T) {
			p, err := LoadPipeline(context.Background(), nb.be, refRequestDir("bf16"))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			for i, c := range refRequest.BF16.Generate {
				want := ref.BF16[i]
				if want.Steps != c.Steps || len(want.Shape) != 3 || want.Shape[0] != c.Height || want.Shape[1] != c.Width {
					t.Fatalf("case %d: the pipeline took %d steps to a %v image", i, want.Steps, want.Shape)
				}
				lat, err := p.Latents(context.Background(), Request{Prompt: c.Prompt, N: 1, Width: c.Width, Height: c.Height, Steps: c.Steps, Seed: c.Seed}, nil)
				if err != nil {
					t.Fatal(err)
				}
				checkClose(t, fmt.Sprintf("case %d latents", i), Pack(lat[0]), want.Latents, 1e-4)
				img, err := p.VAE.DecodeImage(context.Background(), lat[0])
				if err != nil {
					t.Fatal(err)
				}
				checkPixels(t, fmt.Sprintf("case %d image", i), img, want.PIL, 2)
			}
		})
	}
}

// refRequestDir is the directory of one of the reference's checkpoints.
func refRequestDir(name string) string { return filepath.Join(refDir, name) }

// TestQuantizedMatchesDiffusers: the transformer with its linear layers
// 4-bit MLX affine quantized (groups of 32) loads through the backends'
// quantized matmul; one forward and a 2-step denoising loop equal
// Flux2Transformer2DModel on the weights dequantized in Python, within
// 1e-4 relative; the file and the uploaded weights are smaller than the
// float transformer's. The quantization's own error (against the float
// checkpoint it came from) is logged.
func TestQuantizedMatchesDiffusers(t *testing.T) {
	ref := reference(t)
	cfg := QuantDemo()
	dir := refRequestDir("quant")
	sc := schedulerConfig(t, dir)
	for _, nb := range testBackends(t) {
		t.Run(nb.name, func(t *testing.T) {
			m, err := LoadTransformer(nb.be, dir)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			f, err := LoadTransformer(nb.be, refRequestDir("demo"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()

			// Every matrix with a multiple of 32 inputs is quantized: all but
			// x_embedder (16) and context_embedder (48), as Python counted.
			scales := 0
			for _, n := range m.file.Names() {
				if strings.HasSuffix(n, ".scales") {
					scales++
				}
			}
			if scales != 21 || ref.Quant.Quantized != scales {
				t.Errorf("%d quantized modules in the file, %d dequantized by the reference, want 21", scales, ref.Quant.Quantized)
			}
			qb, fb := weightBytes(m.weights), weightBytes(f.weights)
			t.Logf("weights: file %d bytes quantized, %d float; uploaded %d, %d", m.bytes, f.bytes, qb, fb)
			if m.bytes >= f.bytes || qb >= fb {
				t.Errorf("quantized weights are not smaller: file %d vs %d, uploaded %d vs %d", m.bytes, f.bytes, qb, fb)
			}

			for i, c := range refRequest.Quant.Forward {
				got, err := m.Forward(context.Background(), forwardInputs(cfg, c))
				if err != nil {
					t.Fatal(err)
				}
				checkClose(t, fmt.Sprintf("forward %d against dequantized diffusers", i), got, ref.Quant.Forward[i].Out, 1e-4)
				logDistance(t, fmt.Sprintf("forward %d against the float checkpoint (the quantization's error)", i), got, ref.Forward[i].Out)
			}
			for i, c := range refRequest.Quant.Denoise {
				in := forwardInputs(cfg, forwardCase{Size: c.Size, Seed: c.Seed, Text: c.Text, TextSeed: c.TextSeed})
				sched, err := NewSchedule(sc, c.Steps, len(in.ImageIDs))
				if err != nil {
					t.Fatal(err)
				}
				if ref.Quant.Denoise[i].Steps != c.Steps {
					t.Fatalf("case %d: the pipeline took %d steps, want %d", i, ref.Quant.Denoise[i].Steps, c.Steps)
				}
				got, err := m.Denoise(context.Background(), sched, in)
				if err != nil {
					t.Fatal(err)
				}
				checkClose(t, fmt.Sprintf("denoise %d (%d steps) against dequantized diffusers", i, c.Steps), got, ref.Quant.Denoise[i].Latents, 1e-4)
			}
		})
	}
}

func weightBytes(ws []backend.Weight) int64 {
	var n int64
	for _, w := range ws {
		n += w.Bytes()
	}
	return n
}

// logDistance logs the largest difference of got from want, relative to
// want's largest value.
func logDistance(t *testing.T, what string, got []float32, want []uint32) {
	t.Helper()
	scale, worst := 0.0, 0.0
	for i, b := range want {
		w := float64(math.Float32frombits(b))
		scale = max(scale, math.Abs(w))
		worst = max(worst, math.Abs(float64(got[i])-w))
	}
	t.Logf("%s: max difference %.3g, max |value| %.3g (relative %.3g)", what, worst, scale, worst/scale)
}

// TestQuantizedRejects: quantization blocks that do not describe the
// file, or that the loader does not run, are errors (no Python needed).
func TestQuantizedRejects(t *testing.T) {
	dir := t.TempDir()
	if err := CreateDemo(dir, QuantDemo()); err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{})
	defer be.Close()
	rejectConfigs(t, filepath.Join(dir, TransformerDir, ComponentConfig), []configCase[TransformerConfig]{
		{"group size", func(c *TransformerConfig) { c.Quantization = json.RawMessage(`{"group_size": 64, "bits": 4}`) }, "scales"},
		{"bits", func(c *TransformerConfig) { c.Quantization = json.RawMessage(`{"group_size": 32, "bits": 8}`) }, "values per row"},
		{"mode", func(c *TransformerConfig) {
			c.Quantization = json.RawMessage(`{"group_size": 32, "bits": 4, "mode": "mxfp4"}`)
		}, "mxfp4"},
		{"no block", func(c *TransformerConfig) { c.Quantization = nil }, "not quantized"},
	}, func() (io.Closer, error) { return LoadTransformer(be, dir) })
	for _, o := range []DemoOptions{
		func() DemoOptions { o := QuantDemo(); o.GroupSize = 64; return o }(), // the 32-wide to_out split falls inside a group
		func() DemoOptions { o := QuantDemo(); o.Quantize = 7; return o }(),
	} {
		if err := CreateDemo(t.TempDir(), o); err == nil {
			t.Errorf("CreateDemo with %d bits in groups of %d: no error", o.Quantize, o.GroupSize)
		}
	}
}
