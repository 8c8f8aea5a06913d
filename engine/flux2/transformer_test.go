package flux2

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu"
)

// namedBackend is a backend the transformer's parity runs on.
type namedBackend struct {
	name string
	be   backend.Backend
}

// testBackends is the CPU backend and, where libmlxc loads, MLX in
// float32 (transformer_mlx_test.go).
func testBackends(t *testing.T) []namedBackend {
	c := cpu.New(cpu.Options{})
	t.Cleanup(func() { c.Close() })
	out := []namedBackend{{"cpu", c}}
	if m := mlxBackend(t); m != nil {
		out = append(out, namedBackend{"mlx", m})
	}
	return out
}

// TestTransformerMatchesDiffusers: one forward of the demo checkpoint's
// transformer on the pipeline's initial latents for a seed, randn text
// hidden states and a timestep equals Flux2Transformer2DModel's output
// within 1e-4 relative to the output's scale, on every backend.
func TestTransformerMatchesDiffusers(t *testing.T) {
	ref := reference(t)
	cfg := TinyDemo()
	for _, nb := range testBackends(t) {
		t.Run(nb.name, func(t *testing.T) {
			m, err := LoadTransformer(nb.be, filepath.Join(refDir, "demo"))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			for i, c := range refRequest.Forward {
				got, err := m.Forward(context.Background(), forwardInputs(cfg, c))
				if err != nil {
					t.Fatal(err)
				}
				checkClose(t, fmt.Sprintf("case %d (%d×%d, t=%v)", i, c.Size, c.Size, c.T), got, ref.Forward[i].Out, 1e-4)
			}
		})
	}
}

// forwardInputs builds what reference.py gives the transformer for c.
func forwardInputs(cfg DemoOptions, c forwardCase) Inputs {
	h, w := LatentGrid(c.Size, c.Size, cfg.VAE.ScaleFactor())
	return Inputs{
		Image:    Pack(InitialNoise(NewGenerator(c.Seed), 1, cfg.Transformer.InChannels, h, w)[0]),
		ImageIDs: LatentIDs(h, w),
		Text:     NewGenerator(c.TextSeed).Randn(c.Text * cfg.Transformer.JointAttentionDim),
		TextIDs:  TextIDs(c.Text),
		Timestep: c.T,
	}
}

// checkClose wants every value within tol·max|want| of torch's, and logs
// the largest difference.
func checkClose(t *testing.T, what string, got []float32, want []uint32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, diffusers %d", what, len(got), len(want))
	}
	scale, worst := 0.0, 0.0
	for _, b := range want {
		scale = max(scale, math.Abs(float64(math.Float32frombits(b))))
	}
	for i, v := range got {
		d := math.Abs(float64(v) - float64(math.Float32frombits(want[i])))
		if math.IsNaN(d) {
			d = math.Inf(1)
		}
		worst = max(worst, d)
	}
	t.Logf("%s: max |ours − diffusers| %.3g, max |diffusers| %.3g (relative %.3g)", what, worst, scale, worst/scale)
	if !(worst <= tol*scale) {
		t.Errorf("%s: max difference %.3g > %.3g", what, worst, tol*scale)
	}
}

// TestDenoiseMatchesPipeline: the schedule and the transformer stepped
// 2 and 4 times give the packed latents Flux2KleinPipeline has after its
// last step, within 1e-4 relative to their scale.
func TestDenoiseMatchesPipeline(t *testing.T) {
	ref := reference(t)
	cfg := TinyDemo()
	dir := filepath.Join(refDir, "demo")
	raw, err := os.ReadFile(filepath.Join(dir, SchedulerConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	var sc SchedulerConfig
	if err := json.Unmarshal(raw, &sc); err != nil {
		t.Fatal(err)
	}
	for _, nb := range testBackends(t) {
		t.Run(nb.name, func(t *testing.T) {
			m, err := LoadTransformer(nb.be, dir)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			for i, c := range refRequest.Denoise {
				in := forwardInputs(cfg, forwardCase{Size: c.Size, Seed: c.Seed, Text: c.Text, TextSeed: c.TextSeed})
				sched, err := NewSchedule(sc, c.Steps, len(in.ImageIDs))
				if err != nil {
					t.Fatal(err)
				}
				if ref.Denoise[i].Steps != c.Steps {
					t.Fatalf("case %d: the pipeline took %d steps, want %d", i, ref.Denoise[i].Steps, c.Steps)
				}
				got, err := m.Denoise(context.Background(), sched, in)
				if err != nil {
					t.Fatal(err)
				}
				checkClose(t, fmt.Sprintf("case %d (%d×%d, %d steps)", i, c.Size, c.Size, c.Steps), got, ref.Denoise[i].Latents, 1e-4)
			}
		})
	}
}
