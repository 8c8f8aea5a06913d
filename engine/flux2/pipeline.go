package flux2

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"fusion/engine/backend"
)

// Pipeline is a loaded FLUX.2 [klein] checkpoint: the text encoder, the
// transformer, the scheduler's configuration and the VAE decoder (whose
// Config().ScaleFactor() an image side must be twice a multiple of).
type Pipeline struct {
	Text        *TextEncoder
	Transformer *Transformer
	VAE         *VAE
	Scheduler   SchedulerConfig
}

// LoadPipeline loads a checkpoint directory's text encoder, transformer,
// scheduler and VAE decoder onto be.
func LoadPipeline(ctx context.Context, be backend.Backend, dir string) (*Pipeline, error) {
	var sc SchedulerConfig
	if err := readJSON(filepath.Join(dir, SchedulerConfigFile), &sc); err != nil {
		return nil, err
	}
	te, err := LoadTextEncoder(ctx, be, dir)
	if err != nil {
		return nil, err
	}
	tr, err := LoadTransformer(be, dir)
	if err != nil {
		te.Close()
		return nil, err
	}
	if tr.Config().JointAttentionDim != te.Width() {
		te.Close()
		tr.Close()
		return nil, fmt.Errorf("flux2: the transformer takes text tokens of %d, the text encoder gives %d", tr.Config().JointAttentionDim, te.Width())
	}
	vae, err := LoadVAE(be, dir)
	if err != nil {
		te.Close()
		tr.Close()
		return nil, err
	}
	return &Pipeline{Text: te, Transformer: tr, VAE: vae, Scheduler: sc}, nil
}

// IsCheckpoint reports whether dir holds a FLUX.2 pipeline in diffusers'
// layout: a model_index.json naming a Flux2 pipeline class.
func IsCheckpoint(dir string) bool {
	var idx ModelIndex
	if readJSON(filepath.Join(dir, ModelIndexFile), &idx) != nil {
		return false
	}
	return strings.HasPrefix(idx.ClassName, "Flux2")
}

// WeightBytes is the memory the weights hold: the text encoder's loaded
// layers, the transformer's and the VAE's files.
func (p *Pipeline) WeightBytes() int64 {
	return p.Text.model.WeightBytes() + p.Transformer.bytes + p.VAE.bytes
}

// Close releases the text encoder, the transformer and the VAE.
func (p *Pipeline) Close() error {
	return errors.Join(p.Text.Close(), p.Transformer.Close(), p.VAE.Close())
}

// Request is one generation: N images of Width×Height pixels from Prompt,
// Steps denoising steps, the initial noise of Seed.
type Request struct {
	Prompt        string
	N             int
	Width, Height int
	Steps         int
	Seed          uint64
	// First and Total place the N images in a batch of Total (0: N)
	// drawn from the one generator of Seed: the request makes images
	// [First, First+N) of that batch, each equal to the image the whole
	// batch would make (a batch split across nodes).
	First, Total int
	// OnLatents, if set, is told after each denoising step of each image
	// (image numbered in the batch, step from 1) the image's current
	// latents, patchified [C, H, W] as Latents returns them; they are
	// valid during the call only.
	OnLatents func(image, step, steps int, l Latents)
}

// ErrBadSize: a side that is not a positive multiple of twice the VAE's
// scale factor.
var ErrBadSize = errors.New("flux2: image size")

// Progress is told after each denoising step of each image (image from
// 0, step from 1 to steps).
type Progress func(image, step, steps int)

// Latents runs the pipeline up to the denoised latents: the prompt's text
// tokens, the initial noise of the seed for all N images in one draw (as
// diffusers' num_images_per_prompt), then per image the schedule's steps.
// It returns each image's latents unpacked to [C, H, W] (the transformer's
// patchified channels; VAE.DecodeImage makes the picture). It stops between
// steps when ctx is done.
func (p *Pipeline) Latents(ctx context.Context, r Request, progress Progress) ([]Latents, error) {
	scale := p.VAE.Config().ScaleFactor()
	side := 2 * scale
	if r.Width <= 0 || r.Height <= 0 || r.Width%side != 0 || r.Height%side != 0 {
		return nil, fmt.Errorf("%w: %d×%d is not a multiple of %d", ErrBadSize, r.Width, r.Height, side)
	}
	if r.N <= 0 || r.Steps <= 0 {
		return nil, fmt.Errorf("flux2: %d images of %d steps", r.N, r.Steps)
	}
	total := r.Total
	if total == 0 {
		total = r.N
	}
	if r.First < 0 || r.First+r.N > total {
		return nil, fmt.Errorf("flux2: images [%d, %d) of a batch of %d", r.First, r.First+r.N, total)
	}
	text, err := p.Text.Encode(ctx, r.Prompt)
	if err != nil {
		return nil, err
	}
	h, w := LatentGrid(r.Width, r.Height, scale)
	cfg := p.Transformer.Config()
	noise := InitialNoise(NewGenerator(r.Seed), total, cfg.InChannels, h, w)[r.First : r.First+r.N]
	ids := LatentIDs(h, w)
	sched, err := NewSchedule(p.Scheduler, r.Steps, len(ids))
	if err != nil {
		return nil, err
	}
	out := make([]Latents, r.N)
	for i, n := range noise {
		in := Inputs{Image: Pack(n), ImageIDs: ids, Text: text, TextIDs: TextIDs(p.Text.MaxLen)}
		after := r.stepDone(i+r.First, progress, cfg.InChannels, h, w, ids)
		x, err := p.Transformer.denoise(ctx, sched, in, after)
		if err != nil {
			return nil, fmt.Errorf("flux2: image %d of %d: %w", i+1, r.N, err)
		}
		if out[i], err = Unpack(x, ids, cfg.InChannels, h, w); err != nil {
			return nil, err
		}
	}
	return out, nil
}
