package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"path/filepath"
	"strings"
	"testing"

	"fusion/engine"
	"fusion/engine/demo"
	"fusion/engine/demo/demotest"
	"fusion/engine/flux2"
	"fusion/engine/prompt"
)

// newImageRunner is a runner over the demo chat model and a tiny FLUX.2
// [klein] checkpoint ("flux"), and the same with a 4-bit MLX affine
// transformer ("flux-q4").
func newImageRunner(t *testing.T, cfg Config) *Runner {
	t.Helper()
	dir := t.TempDir()
	demotest.Create(t, filepath.Join(dir, "demo"), demo.Options{Arch: "qwen3", Seed: 7})
	if err := flux2.CreateDemo(filepath.Join(dir, "flux"), flux2.TinyDemo()); err != nil {
		t.Fatal(err)
	}
	q4 := flux2.TinyDemo()
	q4.Quantize, q4.GroupSize = 4, 32
	if err := flux2.CreateDemo(filepath.Join(dir, "flux-q4"), q4); err != nil {
		t.Fatal(err)
	}
	cfg.ModelsDir = dir
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestGenerateImage: the checkpoint is listed as an image model; a chat
// request completes while an image generation is between its steps (the
// image queue is not the chat scheduler's); a cancelled generation stops
// after the step it was in; the queue's bound, the memory check and bad
// requests refuse before any step.
func TestGenerateImage(t *testing.T) {
	r := newImageRunner(t, Config{MaxQueuedImages: 1})
	ctx := context.Background()
	models, err := r.Models(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, m := range models {
		kinds[m.ID] = m.Kind
	}
	if kinds["flux"] != engine.KindImage || kinds["demo"] != engine.KindChat {
		t.Fatalf("kinds %v", kinds)
	}
	req := func(onStep func(engine.ImageStep)) *engine.ImageRequest {
		return &engine.ImageRequest{Model: "flux", Prompt: "a cat", N: 1, Width: 32, Height: 32, Steps: 3, Seed: 1, OnStep: onStep}
	}

	t.Run("chat runs during an image", func(t *testing.T) {
		var steps []int
		chatDone := false
		res, err := r.GenerateImage(ctx, req(func(s engine.ImageStep) {
			steps = append(steps, s.Step)
			if s.Step != 2 {
				return
			}
			ch, err := r.Generate(ctx, chat("demo", "hello", 4))
			if err != nil {
				t.Error(err)
				return
			}
			_, final, _ := collect(t, ch)
			chatDone = final.Done
		}))
		if !chatDone || len(steps) != 3 {
			t.Errorf("chat done %v, steps %v", chatDone, steps)
		}
		// The denoised latents through the VAE decoder: one 32×32 PNG.
		if err != nil || len(res.PNG) != 1 {
			t.Fatalf("%v, %+v", err, res)
		}
		img, err := png.Decode(bytes.NewReader(res.PNG[0]))
		if err != nil || img.Bounds().Dx() != 32 || img.Bounds().Dy() != 32 {
			t.Errorf("png %v, %v", err, img)
		}
	})

	t.Run("quantized transformer", func(t *testing.T) {
		q := req(nil)
		q.Model, q.Steps = "flux-q4", 2
		res, err := r.GenerateImage(ctx, q)
		if err != nil || len(res.PNG) != 1 {
			t.Fatalf("%v, %+v", err, res)
		}
		if img, err := png.Decode(bytes.NewReader(res.PNG[0])); err != nil || img.Bounds().Dx() != 32 {
			t.Errorf("png %v, %v", err, img)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		steps := 0
		_, err := r.GenerateImage(cctx, req(func(s engine.ImageStep) { steps++; cancel() }))
		if !errors.Is(err, context.Canceled) || steps != 1 {
			t.Errorf("%d steps, error %v", steps, err)
		}
	})

	t.Run("queue full", func(t *testing.T) {
		started, release, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
		go func() {
			defer close(finished)
			r.GenerateImage(ctx, req(func(s engine.ImageStep) {
				if s.Step == 1 {
					close(started)
					<-release
				}
			}))
		}()
		<-started
		_, err := r.GenerateImage(ctx, req(nil))
		close(release)
		<-finished
		var oe *engine.OverloadedError
		if !errors.As(err, &oe) {
			t.Errorf("a second image with a queue of 1: %v", err)
		}
	})

	t.Run("previews", func(t *testing.T) {
		q := req(nil)
		q.Partials = 1
		var previews []engine.ImageStep
		q.OnStep = func(s engine.ImageStep) {
			if s.Preview != nil {
				previews = append(previews, s)
			}
		}
		if _, err := r.GenerateImage(ctx, q); err != nil {
			t.Fatal(err)
		}
		if len(previews) != 1 || previews[0].Step != 1 || previews[0].Partial != 0 {
			t.Fatalf("previews %+v, want one after step 1 of 3", previews)
		}
		img, err := png.Decode(bytes.NewReader(previews[0].Preview))
		if err != nil || img.Bounds().Dx() != 16 || img.Bounds().Dy() != 16 {
			t.Errorf("preview png %v, %v", err, img)
		}
	})

	t.Run("memory", func(t *testing.T) {
		r.cfg.MaxImageBytes = 1 << 10
		defer func() { r.cfg.MaxImageBytes = 0 }()
		steps := 0
		_, err := r.GenerateImage(ctx, req(func(engine.ImageStep) { steps++ }))
		var oe *engine.OverloadedError
		if !errors.As(err, &oe) || steps != 0 {
			t.Errorf("1 KiB of memory: %d steps, error %v", steps, err)
		}
	})

	// At 1024×1024 a pass of the tiny transformer needs about 97 MB, the
	// tiny VAE's decoder 1.08 GB (its mid-block attention over 128²
	// latent pixels, flux2.TestVAEDecodeBytes): with 200 MB the decoder's
	// figure refuses it, before any step.
	t.Run("memory of the decoder", func(t *testing.T) {
		r.cfg.MaxImageBytes = 200 << 20
		defer func() { r.cfg.MaxImageBytes = 0 }()
		steps := 0
		q := req(func(engine.ImageStep) { steps++ })
		q.Width, q.Height = 1024, 1024
		_, err := r.GenerateImage(ctx, q)
		var oe *engine.OverloadedError
		want := fmt.Sprintf("needs about %d bytes of working memory (the VAE decoder's; a transformer pass needs %d), %d are available",
			4*(16384*16384+7*16*16384), 4*4608*(12*32+3*96+4608), 200<<20)
		if !errors.As(err, &oe) || steps != 0 || !strings.Contains(oe.Reason, want) {
			t.Errorf("1024×1024 in 200 MiB: %d steps, error %v; want it to say %q", steps, err, want)
		}
	})

	for name, edit := range map[string]func(*engine.ImageRequest){
		"size":         func(q *engine.ImageRequest) { q.Width = 24 },
		"empty prompt": func(q *engine.ImageRequest) { q.Prompt = " " },
		"no steps":     func(q *engine.ImageRequest) { q.Steps = 0 },
		"chat model":   func(q *engine.ImageRequest) { q.Model = "demo" },
		"share beyond": func(q *engine.ImageRequest) { q.First, q.Total = 1, 1 },
		"previews -1":  func(q *engine.ImageRequest) { q.Partials = -1 },
	} {
		q := req(nil)
		edit(q)
		var ie *prompt.InvalidRequestError
		if _, err := r.GenerateImage(ctx, q); !errors.As(err, &ie) {
			t.Errorf("%s: error %v", name, err)
		}
	}
	q := req(nil)
	q.Model = "nope"
	if _, err := r.GenerateImage(ctx, q); !errors.Is(err, engine.ErrModelNotFound) {
		t.Errorf("unknown model: %v", err)
	}
	ch, err := r.Generate(ctx, chat("flux", "hi", 2))
	var ie *prompt.InvalidRequestError
	if err == nil || !errors.As(err, &ie) {
		t.Errorf("chat on the image model: %v %v", ch, err)
	}
}
