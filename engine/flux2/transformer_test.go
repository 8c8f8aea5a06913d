package flux2

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
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

// configCase is an edit of a component's config.json that its loader
// must refuse with an error mentioning want.
type configCase[C any] struct {
	name string
	edit func(*C)
	want string
}

// rejectConfigs writes each edit of the config at path in turn (putting
// the original back afterwards) and wants load to fail as the case says.
func rejectConfigs[C any](t *testing.T, path string, cases []configCase[C], load func() (io.Closer, error)) {
	t.Helper()
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var cfg C
			if err := json.Unmarshal(good, &cfg); err != nil {
				t.Fatal(err)
			}
			c.edit(&cfg)
			raw, _ := json.Marshal(cfg)
			if err := os.WriteFile(path, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			defer os.WriteFile(path, good, 0o644)
			m, err := load()
			if err == nil {
				m.Close()
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want it to mention %q", err, c.want)
			}
		})
	}
}

// TestTransformerRejects: checkpoints the transformer cannot run and
// inputs of the wrong size are errors, not panics (no Python needed).
func TestTransformerRejects(t *testing.T) {
	dir := t.TempDir()
	if err := CreateDemo(dir, TinyDemo()); err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{})
	defer be.Close()
	rejectConfigs(t, filepath.Join(dir, TransformerDir, ComponentConfig), []configCase[TransformerConfig]{
		{"guidance", func(c *TransformerConfig) { c.GuidanceEmbeds = true }, "guidance_embeds"},
		{"missing weight", func(c *TransformerConfig) { c.NumLayers = 2 }, "is missing"},
		{"patch size", func(c *TransformerConfig) { c.PatchSize = 2 }, "unsupported"},
	}, func() (io.Closer, error) { return LoadTransformer(be, dir) })

	m, err := LoadTransformer(be, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ok := forwardInputs(TinyDemo(), forwardCase{Size: 32, Seed: 1, Text: 2, TextSeed: 2, T: 500})
	if _, err := m.Forward(context.Background(), ok); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*Inputs){
		"short image":  func(in *Inputs) { in.Image = in.Image[1:] },
		"short text":   func(in *Inputs) { in.Text = in.Text[:len(in.Text)-1] },
		"no text":      func(in *Inputs) { in.Text, in.TextIDs = nil, nil },
		"no image":     func(in *Inputs) { in.Image, in.ImageIDs = nil, nil },
		"ids mismatch": func(in *Inputs) { in.ImageIDs = in.ImageIDs[1:] },
	} {
		in := ok
		edit(&in)
		if _, err := m.Forward(context.Background(), in); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
