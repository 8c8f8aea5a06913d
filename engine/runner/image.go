package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"math"
	"strings"

	"fusion/engine"
	"fusion/engine/flux2"
)

// DefaultMaxQueuedImages is Config.MaxQueuedImages' default.
const DefaultMaxQueuedImages = 4

// imageQueue is the image generations' own admission: a bounded number in
// flight and one running at a time on the node. It is apart from the chat
// scheduler, whose step loop keeps running while an image denoises (the
// two share the cores, not a queue), so images cannot starve chat.
type imageQueue struct {
	slots chan struct{} // in flight
	run   chan struct{} // running
}

func newImageQueue(n int) *imageQueue {
	if n <= 0 {
		n = DefaultMaxQueuedImages
	}
	return &imageQueue{slots: make(chan struct{}, n), run: make(chan struct{}, 1)}
}

// enter admits a generation (ErrOverloaded when the queue is full) and
// waits for its turn; done ends it.
func (q *imageQueue) enter(ctx context.Context) (done func(), err error) {
	select {
	case q.slots <- struct{}{}:
	default:
		return nil, &engine.OverloadedError{Reason: fmt.Sprintf("%d image generations in flight (limit %d)", cap(q.slots), cap(q.slots)), RetryAfter: 5}
	}
	select {
	case q.run <- struct{}{}:
		return func() { <-q.run; <-q.slots }, nil
	case <-ctx.Done():
		<-q.slots
		return nil, ctx.Err()
	}
}

// GenerateImage makes req.N images on an image model of the pool (FLUX.2
// [klein] in diffusers' layout), in the node's image queue, after checking
// that the node has the working memory for it. It stops between
// denoising steps when ctx is done.
func (r *Runner) GenerateImage(ctx context.Context, req *engine.ImageRequest) (*engine.ImageResult, error) {
	if strings.TrimSpace(req.Prompt) == "" {
		return nil, invalid("prompt is empty")
	}
	if req.N < 1 || req.Steps < 1 || req.Width < 1 || req.Height < 1 {
		return nil, invalid("%d images of %d×%d in %d steps", req.N, req.Width, req.Height, req.Steps)
	}
	if req.First < 0 || req.Total < 0 || req.First+req.N > max(req.Total, req.N) || req.Partials < 0 {
		return nil, invalid("images [%d, %d) of a batch of %d, %d previews", req.First, req.First+req.N, req.Total, req.Partials)
	}
	done, err := r.images.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	em, release, err := r.enterEncoder(ctx, req.Model)
	if err != nil {
		return nil, err
	}
	defer release()
	if em == nil || em.img == nil {
		return nil, invalid("model %q is a%s %s model; it does not make images", req.Model, article(kindOf(em)), kindOf(em))
	}
	p := em.img
	if need, what := imageBytes(p, req); need > r.imageMemory() {
		return nil, &engine.OverloadedError{Reason: fmt.Sprintf("a %d×%d image needs about %d bytes of working memory (%s), %d are available",
			req.Width, req.Height, need, what, r.imageMemory()), RetryAfter: 5}
	}
	fr := flux2.Request{Prompt: req.Prompt, N: req.N, Width: req.Width, Height: req.Height, Steps: req.Steps, Seed: req.Seed,
		First: req.First, Total: req.Total}
	if req.OnStep != nil {
		fr.OnLatents = previewer(ctx, p, req)
	}
	lat, err := p.Latents(ctx, fr, nil)
	switch {
	case errors.Is(err, flux2.ErrBadSize):
		return nil, invalid("%v", err)
	case err != nil:
		return nil, err
	}
	return decodeImages(ctx, p, lat)
}

// decodeImages turns each image's latents into a PNG file through the
// pipeline's VAE decoder; it stops between images when ctx is done.
func decodeImages(ctx context.Context, p *flux2.Pipeline, lat []flux2.Latents) (*engine.ImageResult, error) {
	res := &engine.ImageResult{PNG: make([][]byte, len(lat))}
	for i, l := range lat {
		img, err := p.VAE.DecodeImage(ctx, l)
		if err != nil {
			return nil, fmt.Errorf("image %d of %d: %w", i+1, len(lat), err)
		}
		var b bytes.Buffer
		if err := png.Encode(&b, img); err != nil {
			return nil, fmt.Errorf("image %d of %d: png: %w", i+1, len(lat), err)
		}
		res.PNG[i] = b.Bytes()
	}
	return res, nil
}

// imageMemory is the working memory a generation may take.
func (r *Runner) imageMemory() int64 {
	if r.cfg.MaxImageBytes > 0 {
		return r.cfg.MaxImageBytes
	}
	if free := FreeRAM(); free > 0 {
		return free / 2
	}
	return 1 << 62 // unknown: do not refuse
}

// imageBytes estimates a generation's working memory, the larger of one
// transformer pass's and the VAE decoder's at the full image size (they
// run one after the other), and says which it is.
func imageBytes(p *flux2.Pipeline, req *engine.ImageRequest) (int64, string) {
	pass, decode := transformerBytes(p, req), p.VAE.Config().DecodeBytes(req.Width, req.Height)
	if decode > pass {
		return decode, fmt.Sprintf("the VAE decoder's; a transformer pass needs %d", pass)
	}
	return pass, fmt.Sprintf("a transformer pass's; the VAE decoder needs %d", decode)
}

// transformerBytes estimates the working memory of one transformer pass:
// the joint sequence's activations (a dozen arrays of its width, the
// MLP's hidden ones) and one head's attention scores at a time, in
// float32 (math.MaxInt64 for a size whose estimate would overflow).
func transformerBytes(p *flux2.Pipeline, req *engine.ImageRequest) int64 {
	c := p.Transformer.Config()
	side := int64(2 * p.VAE.Config().ScaleFactor())
	tokens := int64(p.Text.MaxLen) + int64(req.Width)/side*(int64(req.Height)/side)
	if tokens > 1<<28 {
		return math.MaxInt64
	}
	return 4 * (tokens*int64(12*c.Inner()+3*c.MLPHidden()) + tokens*tokens)
}

// previewer reports each denoising step to req.OnStep, with a
// low-resolution PNG (flux2's Pipeline.Preview) on the steps
// engine.PreviewSteps picks for req.Partials. A preview that fails to
// decode is left out (the step is still reported).
func previewer(ctx context.Context, p *flux2.Pipeline, req *engine.ImageRequest) func(image, step, steps int, l flux2.Latents) {
	at := map[int]int{} // step → partial index
	for i, s := range engine.PreviewSteps(req.Partials, req.Steps) {
		at[s] = i
	}
	return func(image, step, steps int, l flux2.Latents) {
		st := engine.ImageStep{Image: image, Step: step, Steps: steps}
		if k, ok := at[step]; ok {
			if img, err := p.Preview(ctx, l); err == nil {
				var b bytes.Buffer
				if png.Encode(&b, img) == nil {
					st.Preview, st.Partial = b.Bytes(), k
				}
			}
		}
		req.OnStep(st)
	}
}
