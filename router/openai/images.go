package openai

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"image/jpeg"
	"image/png"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gen2brain/webp"
	"github.com/go-chi/chi/v5"

	"fusion/engine"
)

// Default limits of an image generation (Options.MaxImageSide,
// MaxImages, MaxImageSteps, ImageRetention).
const (
	DefaultMaxImageSide   = 2048
	DefaultMaxImages      = 4
	DefaultMaxImageSteps  = 100
	DefaultImageRetention = time.Hour
	// DefaultImageSteps: FLUX.2 [klein] is distilled for 4 steps.
	DefaultImageSteps = 4
	// imageMultiple: sides are multiples of the latent patch (FLUX.2's VAE
	// downsamples by 8, then 2×2 patches).
	imageMultiple = 16
	// DefaultMaxStoredImageBytes caps the url results kept at once (the
	// oldest go first), in an ImageStore made with 0.
	DefaultMaxStoredImageBytes = 512 << 20
	// MaxPartialImages caps partial_images, as OpenAI does.
	MaxPartialImages = 3
)

// ImageRequest is the body of POST /v1/images/generate (the contract:
// prompt, n, width, height, steps, guidance, seed) and of OpenAI's POST
// /v1/images/generations (also model, size "WxH", response_format,
// output_format, output_compression, stream; quality, style, user,
// background and moderation are accepted and ignored).
type ImageRequest struct {
	Prompt            *string  `json:"prompt"`
	Model             string   `json:"model"`
	N                 *int     `json:"n"`
	Width             *int     `json:"width"`
	Height            *int     `json:"height"`
	Size              string   `json:"size"`
	Steps             *int     `json:"steps"`
	Guidance          *float64 `json:"guidance"`
	Seed              *uint64  `json:"seed"`
	ResponseFormat    string   `json:"response_format"`
	OutputFormat      string   `json:"output_format"`
	OutputCompression *int     `json:"output_compression"`
	Stream            bool     `json:"stream"`
	PartialImages     *int     `json:"partial_images"`
	Quality           string   `json:"quality"`
	Style             string   `json:"style"`
	User              string   `json:"user"`
	Background        string   `json:"background"`
	Moderation        string   `json:"moderation"`
}

// ImagesResponse is the answer: {created, data: [{b64_json, url}]}, the
// contract's and OpenAI's shape (the field not asked for is null).
type ImagesResponse struct {
	Created      int64       `json:"created"`
	Data         []ImageData `json:"data"`
	OutputFormat string      `json:"output_format"`
	Size         string      `json:"size"`
}

// ImageData is one image.
type ImageData struct {
	B64JSON *string `json:"b64_json"`
	URL     *string `json:"url"`
}

// ImageProgress and ImageCompleted are the events of a streamed generation
// (stream=true): one per denoising step of each image, then one per image.
type ImageProgress struct {
	Type       string `json:"type"` // "image_generation.progress"
	ImageIndex int    `json:"image_index"`
	Step       int    `json:"step"`
	Steps      int    `json:"steps"`
}

// ImagePartial is a low-resolution preview of an image as it denoises
// (OpenAI's partial image event of a streamed generation, asked for with
// partial_images): a PNG decoded from the current latents at half the
// width and height.
type ImagePartial struct {
	Type              string `json:"type"` // "image_generation.partial_image"
	ImageIndex        int    `json:"image_index"`
	PartialImageIndex int    `json:"partial_image_index"`
	Step              int    `json:"step"`
	CreatedAt         int64  `json:"created_at"`
	B64JSON           string `json:"b64_json"`
	OutputFormat      string `json:"output_format"` // "png"
	Size              string `json:"size"`          // the preview's
	Quality           string `json:"quality"`       // "auto"
	Background        string `json:"background"`    // "opaque"
}

// ImageCompleted carries one finished image (b64_json or url, as
// response_format asks).
type ImageCompleted struct {
	Type         string  `json:"type"` // "image_generation.completed"
	ImageIndex   int     `json:"image_index"`
	Created      int64   `json:"created"`
	CreatedAt    int64   `json:"created_at"` // OpenAI's name of created
	B64JSON      *string `json:"b64_json"`
	URL          *string `json:"url"`
	OutputFormat string  `json:"output_format"`
	Size         string  `json:"size"`
}

// imageJob is a checked request.
type imageJob struct {
	req         engine.ImageRequest
	url, stream bool
	format      string // "png", "jpeg" or "webp"
	quality     int    // jpeg's and webp's, 1…100
	sizeText    string
}

// checkImageRequest applies the defaults and the limits (both endpoints
// take every field).
func (h *Handler) checkImageRequest(q *ImageRequest) (*imageJob, *Error) {
	maxSide, maxN, maxSteps := orInt(h.opts.MaxImageSide, DefaultMaxImageSide), orInt(h.opts.MaxImages, DefaultMaxImages), orInt(h.opts.MaxImageSteps, DefaultMaxImageSteps)
	if q.Prompt == nil {
		return nil, missingParam("prompt")
	}
	if strings.TrimSpace(*q.Prompt) == "" {
		return nil, invalidRequest("prompt", "Invalid 'prompt': empty string. Describe the image.")
	}
	j := &imageJob{req: engine.ImageRequest{Model: q.Model, Prompt: *q.Prompt, N: 1, Steps: DefaultImageSteps}, format: "png", quality: 100}
	if q.N != nil {
		if *q.N < 1 || *q.N > maxN {
			return nil, invalidRequest("n", "Invalid 'n': %d. This server makes 1 to %d images per request.", *q.N, maxN)
		}
		j.req.N = *q.N
	}
	if q.Steps != nil {
		if *q.Steps < 1 || *q.Steps > maxSteps {
			return nil, invalidRequest("steps", "Invalid 'steps': %d. This server takes 1 to %d steps.", *q.Steps, maxSteps)
		}
		j.req.Steps = *q.Steps
	}
	if q.Guidance != nil {
		if g := *q.Guidance; !(g >= 0 && g <= 100) {
			return nil, invalidRequest("guidance", "Invalid 'guidance': %v. It is between 0 and 100.", g)
		}
		j.req.Guidance = *q.Guidance
	}
	if q.Seed != nil {
		j.req.Seed = *q.Seed
	} else {
		var b [8]byte
		rand.Read(b[:])
		j.req.Seed = binary.LittleEndian.Uint64(b[:]) >> 1 // fits JSON's exact integers and torch's int64
	}
	w, hgt := min(1024, maxSide), min(1024, maxSide)
	if s := q.Size; s != "" && s != "auto" {
		if q.Width != nil || q.Height != nil {
			return nil, invalidRequest("size", "Give either 'size' or 'width' and 'height', not both.")
		}
		ws, hs, ok := strings.Cut(s, "x")
		var err1, err2 error
		w, err1 = strconv.Atoi(ws)
		hgt, err2 = strconv.Atoi(hs)
		if !ok || err1 != nil || err2 != nil {
			return nil, invalidRequest("size", "Invalid 'size': %q. Use \"WIDTHxHEIGHT\", e.g. \"1024x1024\".", s)
		}
	}
	if q.Width != nil {
		w = *q.Width
	}
	if q.Height != nil {
		hgt = *q.Height
	}
	for _, side := range []struct {
		name string
		v    int
	}{{"width", w}, {"height", hgt}} {
		if side.v < imageMultiple || side.v > maxSide || side.v%imageMultiple != 0 {
			param := side.name
			if q.Size != "" && q.Size != "auto" {
				param = "size"
			}
			return nil, invalidRequest(param, "Invalid %s %d: image sides are multiples of %d from %d to %d.", side.name, side.v, imageMultiple, imageMultiple, maxSide)
		}
	}
	j.req.Width, j.req.Height = w, hgt
	j.sizeText = fmt.Sprintf("%dx%d", w, hgt)
	switch q.ResponseFormat {
	case "", "b64_json":
	case "url":
		j.url = true
	default:
		return nil, invalidRequest("response_format", "Invalid 'response_format': %q. Supported values are: 'b64_json' and 'url'.", q.ResponseFormat)
	}
	switch q.OutputFormat {
	case "", "png":
	case "jpeg", "jpg":
		j.format, j.quality = "jpeg", 90
	case "webp":
		j.format, j.quality = "webp", 90
	default:
		return nil, invalidRequest("output_format", "Invalid 'output_format': %q. Supported values are: 'png', 'jpeg' and 'webp'.", q.OutputFormat)
	}
	if c := q.OutputCompression; c != nil {
		if *c < 0 || *c > 100 {
			return nil, invalidRequest("output_compression", "Invalid 'output_compression': %d. It is between 0 and 100.", *c)
		}
		if j.format != "png" {
			j.quality = max(1, 100-*c)
		}
	}
	j.stream = q.Stream
	if p := q.PartialImages; p != nil {
		if *p < 0 || *p > MaxPartialImages {
			return nil, invalidRequest("partial_images", "Invalid 'partial_images': %d. It is between 0 and %d.", *p, MaxPartialImages)
		}
		if j.stream {
			j.req.Partials = *p // previews travel only in a stream
		}
	}
	return j, nil
}

func orInt(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// POST /v1/images/generate and /v1/images/generations
func (h *Handler) imagesGenerate(w http.ResponseWriter, r *http.Request) {
	var q ImageRequest
	if e := decodeBody(r, &q); e != nil {
		h.reject(w, r, e)
		return
	}
	j, e := h.checkImageRequest(&q)
	if e != nil {
		h.reject(w, r, e)
		return
	}
	ig, ok := h.engine.(engine.ImageGenerator)
	if !ok {
		h.reject(w, r, &Error{Status: http.StatusNotImplemented, Type: TypeInvalidRequest, Code: "unsupported",
			Message: "This server's engine does not make images."})
		return
	}
	if j.req.Model == "" {
		if j.req.Model, e = h.defaultImageModel(r); e != nil {
			h.reject(w, r, e)
			return
		}
	}
	var sse *sseWriter
	if j.stream {
		sse = newSSEWriter(w)
		j.req.OnStep = func(s engine.ImageStep) {
			sse.data(ImageProgress{Type: "image_generation.progress", ImageIndex: s.Image, Step: s.Step, Steps: s.Steps})
			if s.Preview != nil {
				sse.data(ImagePartial{Type: "image_generation.partial_image", ImageIndex: s.Image, PartialImageIndex: s.Partial,
					Step: s.Step, CreatedAt: time.Now().Unix(), B64JSON: base64.StdEncoding.EncodeToString(s.Preview),
					OutputFormat: "png", Size: pngSize(s.Preview), Quality: "auto", Background: "opaque"})
			}
		}
	}
	res, err := ig.GenerateImage(r.Context(), &j.req)
	if err == nil && len(res.PNG) != j.req.N {
		err = fmt.Errorf("the engine made %d images of %d", len(res.PNG), j.req.N)
	}
	var data []ImageData
	if err == nil {
		data, err = h.imageData(r, j, res.PNG)
	}
	if err != nil {
		ee := engineError(err, j.req.Model)
		if ee.Code == "model_not_found" {
			ee.Status = http.StatusBadRequest // OpenAI's images API: an invalid model is a 400
		}
		if sse != nil && sse.started {
			h.metrics.Rejected()
			sse.fail(ee)
			return
		}
		h.reject(w, r, ee)
		return
	}
	created := time.Now().Unix()
	if sse != nil {
		for i, d := range data {
			sse.data(ImageCompleted{Type: "image_generation.completed", ImageIndex: i, Created: created, CreatedAt: created, B64JSON: d.B64JSON, URL: d.URL,
				OutputFormat: j.format, Size: j.sizeText})
		}
		sse.done()
		return
	}
	writeJSON(w, http.StatusOK, ImagesResponse{Created: created, Data: data, OutputFormat: j.format, Size: j.sizeText})
}

// defaultImageModel is the first image model the engine lists.
func (h *Handler) defaultImageModel(r *http.Request) (string, *Error) {
	models, err := h.engine.Models(r.Context())
	if err != nil {
		return "", FromEngine(err)
	}
	for _, m := range models {
		if m.Kind == engine.KindImage {
			return m.ID, nil
		}
	}
	return "", invalidRequest("model", "No image model is available on this server; name one with 'model'.")
}

// imageData encodes the engine's PNG files as the request asks: base64,
// or stored here (on the node that answers the client; a forwarded
// generation's files came back with its reply) behind a url.
func (h *Handler) imageData(r *http.Request, j *imageJob, pngs [][]byte) ([]ImageData, error) {
	out := make([]ImageData, len(pngs))
	for i, p := range pngs {
		b, err := j.encode(p)
		if err != nil {
			return nil, fmt.Errorf("image %d: %w", i, err)
		}
		if !j.url {
			s := base64.StdEncoding.EncodeToString(b)
			out[i].B64JSON = &s
			continue
		}
		id := h.images.put(h.opts.NodeID, b, "image/"+j.format, orDuration(h.opts.ImageRetention, DefaultImageRetention))
		u := baseURL(r) + "/v1/images/files/" + id + "." + j.format
		out[i].URL = &u
	}
	return out, nil
}

// encode turns one of the engine's PNG files into the asked format:
// JPEG with the standard library, WebP with libwebp (lossy) through
// github.com/gen2brain/webp — compiled to WASM and run by wazero, so no
// cgo; the first WebP of a process compiles the module (about a second),
// later ones take ~10 ms at 256² and ~0.35 s at 1024² on the 2-core VM.
// Where a libwebp.so is installed that library loads instead.
func (j *imageJob) encode(p []byte) ([]byte, error) {
	if j.format == "png" {
		return p, nil
	}
	img, err := png.Decode(bytes.NewReader(p))
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	switch j.format {
	case "jpeg":
		err = jpeg.Encode(&buf, img, &jpeg.Options{Quality: j.quality})
	case "webp":
		err = webp.Encode(&buf, img, webp.Options{Quality: j.quality})
	default:
		err = fmt.Errorf("output format %q", j.format)
	}
	return buf.Bytes(), err
}

func orDuration(v, def time.Duration) time.Duration {
	if v > 0 {
		return v
	}
	return def
}

// baseURL is the scheme and host the client called.
func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if p := r.Header.Get("X-Forwarded-Proto"); p == "http" || p == "https" {
		scheme = p
	}
	return scheme + "://" + r.Host
}

// pngSize is the "WxH" of a PNG file ("" when it does not parse).
func pngSize(b []byte) string {
	c, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%dx%d", c.Width, c.Height)
}

// GET /v1/images/files/{id}: a url result, until its retention ends. A
// file another node of the cluster answered (its id names the node) is
// fetched from there through the engine (gRPC, never HTTP).
func (h *Handler) imageFile(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	id, _, _ = strings.Cut(id, ".")
	notFound := &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Code: "file_not_found",
		Message: fmt.Sprintf("No image %q: it never existed or its retention time is over.", id)}
	f, ok := h.images.ImageFile(id)
	if !ok {
		node, local := imageNode(id)
		fetch, can := h.engine.(engine.ImageFileFetcher)
		if local || node == h.opts.NodeID || !can {
			WriteError(w, notFound)
			return
		}
		got, err := fetch.FetchImageFile(r.Context(), node, id)
		switch {
		case errors.Is(err, engine.ErrImageFileNotFound):
			WriteError(w, notFound)
			return
		case err != nil:
			h.reject(w, r, FromEngine(err))
			return
		}
		f = *got
	}
	w.Header().Set("Content-Type", f.ContentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(f.Data)))
	w.Header().Set("Cache-Control", "private, max-age="+strconv.Itoa(max(0, int(time.Until(f.Expires).Seconds()))))
	w.Write(f.Data)
}

// imageNode is the node that keeps url result id: ids of a cluster's
// nodes are "img-" + the node id in hex + "-" + 32 random hex digits; a
// lone node's have no node part (local).
func imageNode(id string) (node string, local bool) {
	rest, ok := strings.CutPrefix(id, "img-")
	hexNode, _, two := strings.Cut(rest, "-")
	if !ok || !two {
		return "", true
	}
	b, err := hex.DecodeString(hexNode)
	if err != nil {
		return "", true
	}
	return string(b), false
}

// ImageStore keeps url results in memory until they expire (checked on
// every put and get: no goroutine), at most maxBytes in all, the oldest
// dropped first. It is safe for concurrent use.
type ImageStore struct {
	mu       sync.Mutex
	files    map[string]*storedImage
	order    []string // insertion order
	bytes    int
	maxBytes int
	now      func() time.Time
}

type storedImage struct {
	data        []byte
	contentType string
	expires     time.Time
}

// NewImageStore returns an empty store of at most maxBytes (0:
// DefaultMaxStoredImageBytes).
func NewImageStore(maxBytes int) *ImageStore {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxStoredImageBytes
	}
	return &ImageStore{files: map[string]*storedImage{}, maxBytes: maxBytes, now: time.Now}
}

// put keeps a file for ttl under a new id that names node (see
// imageNode).
func (s *ImageStore) put(node string, data []byte, contentType string, ttl time.Duration) string {
	var b [16]byte
	rand.Read(b[:])
	id := "img-" + hex.EncodeToString(b[:])
	if node != "" {
		id = "img-" + hex.EncodeToString([]byte(node)) + "-" + hex.EncodeToString(b[:])
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[id] = &storedImage{data: data, contentType: contentType, expires: s.now().Add(ttl)}
	s.order = append(s.order, id)
	s.bytes += len(data)
	s.sweep()
	return id
}

// ImageFile returns the file of id while it is kept (remote's
// ImageFileSource: a peer's ImageFile rpc reads it).
func (s *ImageStore) ImageFile(id string) (engine.ImageFile, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep()
	f, ok := s.files[id]
	if !ok {
		return engine.ImageFile{}, false
	}
	return engine.ImageFile{Data: f.data, ContentType: f.contentType, Expires: f.expires}, true
}

// sweep drops expired files and, over the byte cap, the oldest (but
// never the newest). Retention times are equal, so the order of
// insertion is the order of expiry.
func (s *ImageStore) sweep() {
	now := s.now()
	for len(s.order) > 0 {
		f := s.files[s.order[0]]
		if now.Before(f.expires) && (s.bytes <= s.maxBytes || len(s.order) == 1) {
			break
		}
		s.bytes -= len(f.data)
		delete(s.files, s.order[0])
		s.order = s.order[1:]
	}
}
