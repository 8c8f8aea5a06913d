package engine

import (
	"context"
	"errors"
	"time"
)

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
	// First and Total place the request's N images in a batch of Total
	// (0: N) drawn from Seed's one generator: it makes images [First,
	// First+N) of that batch, each byte for byte the image the whole
	// batch makes there (a batch split across the nodes of a cluster).
	First, Total int
	// Partials asks for that many low-resolution previews of each image
	// while it denoises (OpenAI's partial_images, 0 to 3), handed to
	// OnStep in ImageStep.Preview.
	Partials int
}

// ImageStep is the progress of a generation: step Step of Steps of image
// Image (from 0) of the request.
type ImageStep struct {
	Image, Step, Steps int
	// Preview, on the steps chosen for ImageRequest.Partials, is a PNG
	// of the image as it is now, at a lower resolution.
	Preview []byte
	// Partial numbers the previews of an image from 0.
	Partial int
}

// PreviewSteps returns the steps (from 1) after which a generation of
// steps steps sends a preview when partials are asked: spread evenly,
// the last one before the final step when there is room, at most one
// per step.
func PreviewSteps(partials, steps int) []int {
	var out []int
	for j := 1; j <= partials; j++ {
		s := max(1, j*steps/(partials+1))
		if len(out) > 0 && s <= out[len(out)-1] {
			s = out[len(out)-1] + 1
		}
		if s > steps {
			break
		}
		out = append(out, s)
	}
	return out
}

// ImageResult is a generation's images, each a PNG file.
type ImageResult struct {
	PNG [][]byte
}

// ImageFile is a url result of an image generation, kept on the node
// that answered the request until Expires.
type ImageFile struct {
	Data        []byte
	ContentType string
	Expires     time.Time
}

// ImageFileFetcher fetches a url result kept on another node of the
// cluster by that node's id (the dispatcher, over the Engine service).
// Errors: ErrImageFileNotFound when the node does
// not have it (any more), ErrUnavailable when the node cannot be reached.
type ImageFileFetcher interface {
	FetchImageFile(ctx context.Context, node, id string) (*ImageFile, error)
}

// ErrImageFileNotFound: no url result of that id (it never existed, or
// its retention time is over).
var ErrImageFileNotFound = errors.New("image file not found")

// ImageGenerator turns prompts into images. Errors: ErrModelNotFound,
// ErrUnavailable, ErrOverloaded (the image queue is full, or the node's
// memory cannot take the generation), and *prompt.InvalidRequestError for
// bad input (an empty prompt, a size the model cannot make, a model that
// does not make images).
type ImageGenerator interface {
	GenerateImage(ctx context.Context, req *ImageRequest) (*ImageResult, error)
}
