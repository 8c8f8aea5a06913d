package engine

import "context"

// KindImage: text to image (/v1/images/generate, /v1/images/generations).
const KindImage = "image"

// ImageRequest is the dialect-neutral text-to-image request. Sizes,
// counts and steps arrive checked against the front end's limits; the
// engine checks them against the model (multiples of its latent patch).
type ImageRequest struct {
	Model  string
	Prompt string
	// N images of Width×Height pixels, Steps denoising steps each.
	N, Width, Height, Steps int
	// Guidance is the classifier-free guidance scale; a distilled model
	// (FLUX.2 [klein]) ignores it.
	Guidance float64
	// Seed makes the initial noise (diffusers' manual_seed); every image of
	// the request comes from the one draw.
	Seed uint64
	// OnStep, if set, is called after each denoising step, before
	// GenerateImage returns (a forwarded request's steps arrive as the
	// peer takes them). It must not block for long.
	OnStep func(ImageStep)
}

// ImageStep is the progress of a generation: step Step of Steps of image
// Image (from 0) of the request.
type ImageStep struct {
	Image, Step, Steps int
}

// ImageResult is a generation's images, each a PNG file.
type ImageResult struct {
	PNG [][]byte
}

// ImageGenerator turns prompts into images. Errors: ErrModelNotFound,
// ErrUnavailable, ErrOverloaded (the image queue is full, or the node's
// memory cannot take the generation), and *prompt.InvalidRequestError for
// bad input (an empty prompt, a size the model cannot make, a model that
// does not make images).
type ImageGenerator interface {
	GenerateImage(ctx context.Context, req *ImageRequest) (*ImageResult, error)
}
