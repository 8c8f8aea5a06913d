package flux2

import (
	"context"
	"encoding/json"
	"image"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"fusion/engine/backend/cpu"
)

// TestVAEMatchesPipeline: the image of a whole 4-step 64×64 generation
// (randn prompt embeddings) equals Flux2KleinPipeline's PIL output within
// 2/255 per channel, on every backend — decoding the pipeline's own final
// latents, and decoding ours (Denoise from our seeded noise). The float
// image before quantization is compared too (logged, and held to 1e-4).
func TestVAEMatchesPipeline(t *testing.T) {
	ref := reference(t)
	cfg := TinyDemo()
	dir := filepath.Join(refDir, "demo")
	sc := schedulerConfig(t, dir)
	for _, nb := range testBackends(t) {
		t.Run(nb.name, func(t *testing.T) {
			vae, err := LoadVAE(nb.be, dir)
			if err != nil {
				t.Fatal(err)
			}
			defer vae.Close()
			tr, err := LoadTransformer(nb.be, dir)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			for i, c := range refRequest.Image {
				want := ref.Image[i]
				if want.Steps != c.Steps || len(want.Shape) != 3 || want.Shape[0] != c.Size || want.Shape[1] != c.Size || want.Shape[2] != 3 {
					t.Fatalf("case %d: the pipeline took %d steps to a %v image", i, want.Steps, want.Shape)
				}
				h, w := LatentGrid(c.Size, c.Size, cfg.VAE.ScaleFactor())
				ids := LatentIDs(h, w)

				// The pipeline's own latents, decoded.
				theirs := make([]float32, len(want.Latents))
				for j, b := range want.Latents {
					theirs[j] = math.Float32frombits(b)
				}
				l, err := Unpack(theirs, ids, cfg.Transformer.InChannels, h, w)
				if err != nil {
					t.Fatal(err)
				}
				if err := vae.Denormalize(l); err != nil {
					t.Fatal(err)
				}
				px, ph, pw, err := vae.Decode(context.Background(), Unpatchify(l))
				if err != nil {
					t.Fatal(err)
				}
				if ph != c.Size || pw != c.Size {
					t.Fatalf("decoded %d×%d, want %d×%d", pw, ph, c.Size, c.Size)
				}
				unit := make([]float32, len(px)) // output_type="np": (x·0.5 + 0.5) clamped
				for j, x := range px {
					unit[j] = min(max(float32(x*0.5)+0.5, 0), 1)
				}
				checkClose(t, "decoded pipeline latents, np image", unit, want.NP, 1e-4)
				img, err := ToImage(px, ph, pw)
				if err != nil {
					t.Fatal(err)
				}
				checkPixels(t, "decoded pipeline latents", img, want.PIL, 2)

				// Our whole generation: Denoise, then Image.
				in := forwardInputs(cfg, forwardCase{Size: c.Size, Seed: c.Seed, Text: c.Text, TextSeed: c.TextSeed})
				sched, err := NewSchedule(sc, c.Steps, len(in.ImageIDs))
				if err != nil {
					t.Fatal(err)
				}
				lat, err := tr.Denoise(context.Background(), sched, in)
				if err != nil {
					t.Fatal(err)
				}
				ours, err := Unpack(lat, in.ImageIDs, cfg.Transformer.InChannels, h, w)
				if err != nil {
					t.Fatal(err)
				}
				img, err = vae.DecodeImage(context.Background(), ours)
				if err != nil {
					t.Fatal(err)
				}
				checkPixels(t, "our generation", img, want.PIL, 2)
			}
		})
	}
}

func schedulerConfig(t *testing.T, dir string) SchedulerConfig {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, SchedulerConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	var sc SchedulerConfig
	if err := json.Unmarshal(raw, &sc); err != nil {
		t.Fatal(err)
	}
	return sc
}

// checkPixels wants every RGB byte of img within tol of PIL's and every
// alpha opaque; it logs the largest difference and how many bytes differ.
func checkPixels(t *testing.T, what string, img *image.NRGBA, want []int, tol int) {
	t.Helper()
	b := img.Bounds()
	if b.Dx()*b.Dy()*3 != len(want) {
		t.Fatalf("%s: %v image, diffusers has %d bytes", what, b, len(want))
	}
	worst, differ, inside := 0, 0, 0
	for _, v := range want {
		if v > 0 && v < 255 {
			inside++
		}
	}
	// A comparison of saturated pixels would show little.
	if inside < len(want)/2 {
		t.Fatalf("%s: only %d of diffusers' %d bytes are inside (0, 255)", what, inside, len(want))
	}
	for p := range b.Dx() * b.Dy() {
		o := img.PixOffset(p%b.Dx(), p/b.Dx())
		if img.Pix[o+3] != 255 {
			t.Fatalf("%s: pixel %d has alpha %d", what, p, img.Pix[o+3])
		}
		for c := range 3 {
			d := int(img.Pix[o+c]) - want[3*p+c]
			if d != 0 {
				differ++
			}
			worst = max(worst, d, -d)
		}
	}
	t.Logf("%s: max |ours − diffusers| %d/255, %d of %d bytes differ (%d not saturated)", what, worst, differ, len(want), inside)
	if worst > tol {
		t.Errorf("%s: max pixel difference %d/255 > %d/255", what, worst, tol)
	}
}

// TestToImage: diffusers' quantization, (x·0.5 + 0.5) clamped, ·255,
// rounded half to even, on values at and past the ends.
func TestToImage(t *testing.T) {
	in := []float32{-1, 0, 1, -3, 7, float32(math.NaN()), 1.0 / 255, -1 + 1.0/255, 0.5}
	// 0 → 127.5 → 128 and −1 + 1/255 → 0.5 → 0: halves go to even.
	want := []uint8{0, 128, 255, 0, 255, 0, 128, 0, 191}
	img, err := ToImage(in, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	for p := range 3 {
		for c := range 3 {
			if got := img.Pix[4*p+c]; got != want[3*p+c] {
				t.Errorf("value %v → %d, want %d", in[3*p+c], got, want[3*p+c])
			}
		}
		if img.Pix[4*p+3] != 255 {
			t.Errorf("pixel %d not opaque", p)
		}
	}
	if _, err := ToImage(in, 2, 2); err == nil {
		t.Error("ToImage of 9 values as 2×2: no error")
	}
}

// TestVAERejects: configurations the decoder does not run, missing
// weights and latents of the wrong shape are errors, not panics (no
// Python needed).
func TestVAERejects(t *testing.T) {
	dir := t.TempDir()
	if err := CreateDemo(dir, TinyDemo()); err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{})
	defer be.Close()
	rejectConfigs(t, filepath.Join(dir, VAEDir, ComponentConfig), []configCase[VAEConfig]{
		{"activation", func(c *VAEConfig) { c.ActFn = "gelu" }, "unsupported"},
		{"block type", func(c *VAEConfig) { c.UpBlockTypes[1] = "AttnUpDecoderBlock2D" }, "not supported"},
		{"groups", func(c *VAEConfig) { c.NormNumGroups = 3 }, "groups"},
		{"missing weight", func(c *VAEConfig) { c.LayersPerBlock = 2 }, "is missing"},
		{"latent channels", func(c *VAEConfig) { c.LatentChannels = 8 }, "want 32"},
	}, func() (io.Closer, error) { return LoadVAE(be, dir) })

	v, err := LoadVAE(be, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	h, w := LatentGrid(32, 32, v.Config().ScaleFactor())
	zeros := func(c, n int) Latents { return Latents{C: c, H: h, W: w, Data: make([]float32, n)} }
	img, err := v.DecodeImage(context.Background(), zeros(16, h*w*16))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 32 || b.Dy() != 32 {
		t.Fatalf("image %v, want 32×32", b)
	}
	if _, err := v.DecodeImage(context.Background(), zeros(16, h*w*16-1)); err == nil {
		t.Error("short latents: no error")
	}
	if _, err := v.DecodeImage(context.Background(), zeros(12, h*w*12)); err == nil {
		t.Error("12-channel latents: no error")
	}
	if _, _, _, err := v.Decode(context.Background(), Latents{C: 3, H: 2, W: 2, Data: make([]float32, 12)}); err == nil {
		t.Error("3-channel latents: no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := v.DecodeImage(ctx, zeros(16, h*w*16)); err == nil {
		t.Error("cancelled context: no error")
	}
}

// TestVAEDecodeBytes: the decoder's working-memory estimate, worked out
// by hand for the tiny VAE (widths 16, 16, 8, 8 from the inside out, 8×
// downsampling) at 1024×1024: the mid-block attention over 128² latent
// pixels dominates (16,384² scores + 7 arrays of 16 channels); without
// the attention, the last block's resnets at full resolution (8 arrays
// of 8 channels over 1024² pixels).
func TestVAEDecodeBytes(t *testing.T) {
	c := TinyDemo().VAE
	for _, tc := range []struct {
		attention     bool
		width, height int
		want          int64
	}{
		{true, 1024, 1024, 4 * (16384*16384 + 7*16*16384)},
		{false, 1024, 1024, 4 * (8 * 8 * 1024 * 1024)},
		{false, 64, 32, 4 * (8 * 8 * 64 * 32)},
		{true, 0, 64, 0},
	} {
		c.MidBlockAddAttention = tc.attention
		if got := c.DecodeBytes(tc.width, tc.height); got != tc.want {
			t.Errorf("attention %v, %d×%d: %d bytes, want %d", tc.attention, tc.width, tc.height, got, tc.want)
		}
	}
}
