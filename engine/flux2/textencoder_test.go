package flux2

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"fusion/engine/backend/cpu"
)

// TestTextEncoderMatchesPipeline: the prompt's token ids (chat template,
// padding, truncation) equal the pipeline's, and its text tokens —
// Qwen3's states after layers 9, 18 and 27 under the padding mask — equal
// _get_qwen3_prompt_embeds within 4e-5 relative (measured 1.2e-5 on the CPU, 8.6e-6 on MLX), padding rows included.
func TestTextEncoderMatchesPipeline(t *testing.T) {
	ref := reference(t)
	dir := filepath.Join(refDir, "demo")
	for _, nb := range testBackends(t) {
		t.Run(nb.name, func(t *testing.T) {
			te, err := LoadTextEncoder(context.Background(), nb.be, dir)
			if err != nil {
				t.Fatal(err)
			}
			defer te.Close()
			for i, c := range refRequest.Text {
				te.MaxLen = c.MaxLen
				ids, real, err := te.Tokens(c.Prompt)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(ids, ref.Text[i].IDs) || real != ref.Text[i].Real {
					t.Fatalf("case %d: ids %v (%d real), pipeline %v (%d real)", i, ids, real, ref.Text[i].IDs, ref.Text[i].Real)
				}
				got, err := te.Encode(context.Background(), c.Prompt)
				if err != nil {
					t.Fatal(err)
				}
				checkClose(t, fmt.Sprintf("case %d (%d real of %d tokens)", i, real, c.MaxLen), got, ref.Text[i].Embeds, 4e-5)
			}
		})
	}
}

// TestPipelineLatentsMatchDiffusers: a whole generation from a prompt (2
// images of one seed, 64×32, 2 steps) gives the packed latents
// Flux2KleinPipeline has after its last step, within 1e-4 relative.
func TestPipelineLatentsMatchDiffusers(t *testing.T) {
	ref := reference(t)
	dir := filepath.Join(refDir, "demo")
	be := cpu.New(cpu.Options{})
	defer be.Close()
	p, err := LoadPipeline(context.Background(), be, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i, c := range refRequest.Generate {
		var steps []int
		lat, err := p.Latents(context.Background(), Request{Prompt: c.Prompt, N: c.N, Width: c.Width, Height: c.Height, Steps: c.Steps, Seed: c.Seed},
			func(image, step, n int) { steps = append(steps, image*n+step) })
		if err != nil {
			t.Fatal(err)
		}
		if want := c.N * c.Steps; len(steps) != want || steps[want-1] != want || ref.Generate[i].Steps != c.Steps {
			t.Errorf("case %d: progress %v, pipeline steps %d", i, steps, ref.Generate[i].Steps)
		}
		for j, l := range lat {
			checkClose(t, fmt.Sprintf("case %d image %d", i, j), Pack(l), ref.Generate[i].Latents[j], 1e-4)
		}
	}
}

// TestPipelineStopsAndRejects: a cancelled context stops a generation
// before its next step, and sizes, counts and prompts the pipeline
// cannot take are errors (no Python needed).
func TestPipelineStopsAndRejects(t *testing.T) {
	dir := t.TempDir()
	if err := CreateDemo(dir, TinyDemo()); err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{})
	defer be.Close()
	p, err := LoadPipeline(context.Background(), be, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Text.MaxLen = 32 // test time
	ok := Request{Prompt: "a cat", N: 1, Width: 32, Height: 32, Steps: 3, Seed: 1}

	ctx, cancel := context.WithCancel(context.Background())
	steps := 0
	_, err = p.Latents(ctx, ok, func(image, step, n int) {
		steps++
		if step == 1 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || steps != 1 {
		t.Errorf("cancelled after step 1: %d steps, error %v", steps, err)
	}

	for name, c := range map[string]struct {
		edit func(*Request)
		want error
	}{
		"empty prompt": {func(r *Request) { r.Prompt = "" }, ErrEmptyPrompt},
		"width 24":     {func(r *Request) { r.Width = 24 }, ErrBadSize},
		"height 0":     {func(r *Request) { r.Height = 0 }, ErrBadSize},
		"no steps":     {func(r *Request) { r.Steps = 0 }, nil},
		"no images":    {func(r *Request) { r.N = 0 }, nil},
	} {
		r := ok
		c.edit(&r)
		_, err := p.Latents(context.Background(), r, nil)
		if err == nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: error %v, want %v", name, err, c.want)
		}
	}
}
