package openai_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gen2brain/webp"
	"github.com/go-chi/chi/v5"

	"fusion/cluster"
	"fusion/cluster/fsm"
	"fusion/cluster/remote"
	"fusion/engine"
	"fusion/engine/flux2"
	"fusion/engine/prompt"
	"fusion/internal/testenv"
	"fusion/node"
	"fusion/node/nodetest"
	"fusion/router/openai"
)

const imageModel = "flux2-demo"

// imageEngine is an engine with one image model whose images are flat
// colours of the seed: it takes each step (checking its context first,
// as the runner does between steps) and reports it.
type imageEngine struct {
	stepped   atomic.Int64
	cancelled atomic.Bool
	// stepWait, when set, is waited on before every step after the first.
	stepWait chan struct{}
}

func (e *imageEngine) Generate(context.Context, *engine.Request) (<-chan engine.Event, error) {
	return nil, engine.ErrModelNotFound
}
func (e *imageEngine) Models(context.Context) ([]engine.ModelInfo, error) {
	return []engine.ModelInfo{{ID: "chat", Kind: engine.KindChat}, {ID: imageModel, Kind: engine.KindImage}}, nil
}
func (e *imageEngine) Tokenize(context.Context, string, prompt.Request) (prompt.Result, error) {
	return prompt.Result{}, engine.ErrModelNotFound
}
func (e *imageEngine) Detokenize(context.Context, string, []int) (string, error) {
	return "", engine.ErrModelNotFound
}

func (e *imageEngine) GenerateImage(ctx context.Context, req *engine.ImageRequest) (*engine.ImageResult, error) {
	if req.Model != imageModel {
		return nil, fmt.Errorf("%w: %q", engine.ErrModelNotFound, req.Model)
	}
	res := &engine.ImageResult{}
	for i := range req.N {
		for s := 1; s <= req.Steps; s++ {
			if s > 1 && e.stepWait != nil {
				select {
				case <-e.stepWait:
				case <-ctx.Done():
				}
			}
			if err := ctx.Err(); err != nil {
				e.cancelled.Store(true)
				return nil, err
			}
			e.stepped.Add(1)
			if req.OnStep != nil {
				req.OnStep(engine.ImageStep{Image: i, Step: s, Steps: req.Steps})
			}
		}
		img := image.NewRGBA(image.Rect(0, 0, req.Width, req.Height))
		c := color.RGBA{uint8(req.Seed), uint8(i * 40), 200, 255}
		for p := 0; p < len(img.Pix); p += 4 {
			copy(img.Pix[p:], []byte{c.R, c.G, c.B, c.A})
		}
		var b bytes.Buffer
		png.Encode(&b, img)
		res.PNG = append(res.PNG, b.Bytes())
	}
	return res, nil
}

// imageServers serves the OpenAI dialect twice: on a node whose engine
// makes the images, and on a front end that forwards them over the
// cluster's gRPC Engine service (remote.Client), as a node without the
// model does.
func imageServers(t *testing.T, opts openai.Options) (e *imageEngine, local, forward *httptest.Server) {
	t.Helper()
	e = &imageEngine{}
	mount := func(g engine.Generator) *httptest.Server {
		r := chi.NewRouter()
		openai.New(openai.Config{Engine: g, Options: opts}).Mount(r)
		s := httptest.NewServer(r)
		t.Cleanup(s.Close)
		return s
	}
	srv, err := remote.Listen("127.0.0.1:0", remote.ServerConfig{NodeID: "images", Engine: e})
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Stop(ctx)
	})
	c, err := remote.Dial(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return e, mount(e), mount(c)
}

func postImages(t *testing.T, url, path, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// TestImagesGenerate: both endpoints, directly and forwarded over gRPC,
// give {created, data} with PNG (or JPEG, or WebP) files of the asked size, as
// base64 or as a url served from the answering node.
func TestImagesGenerate(t *testing.T) {
	_, local, forward := imageServers(t, openai.Options{})
	for _, srv := range []struct {
		name string
		s    *httptest.Server
	}{{"local", local}, {"forwarded", forward}} {
		for _, c := range []struct {
			name, path, body string
			n, w, h          int
			format           string
			url              bool
		}{
			{"contract", "/v1/images/generate", `{"prompt":"a fox","n":2,"width":64,"height":32,"steps":2,"guidance":7.5,"seed":3}`, 2, 64, 32, "png", false},
			{"openai size", "/v1/images/generations", `{"model":"flux2-demo","prompt":"a fox","size":"48x16"}`, 1, 48, 16, "png", false},
			{"url jpeg", "/v1/images/generations", `{"prompt":"a fox","size":"32x32","response_format":"url","output_format":"jpeg","n":2}`, 2, 32, 32, "jpeg", true},
			{"url webp", "/v1/images/generations", `{"prompt":"a fox","size":"48x32","response_format":"url","output_format":"webp","output_compression":30}`, 1, 48, 32, "webp", true},
			{"b64 webp", "/v1/images/generations", `{"prompt":"a fox","size":"16x32","output_format":"webp"}`, 1, 16, 32, "webp", false},
		} {
			t.Run(srv.name+"/"+c.name, func(t *testing.T) {
				code, body := postImages(t, srv.s.URL, c.path, c.body)
				if code != http.StatusOK {
					t.Fatalf("%d %s", code, body)
				}
				var res struct {
					Created int64 `json:"created"`
					Data    []struct {
						B64 *string `json:"b64_json"`
						URL *string `json:"url"`
					} `json:"data"`
				}
				if err := json.Unmarshal(body, &res); err != nil {
					t.Fatal(err)
				}
				if res.Created < time.Now().Add(-time.Hour).Unix() || len(res.Data) != c.n {
					t.Fatalf("created %d, %d images: %s", res.Created, len(res.Data), body)
				}
				for _, d := range res.Data {
					var file []byte
					if c.url {
						if d.URL == nil || d.B64 != nil || !strings.HasPrefix(*d.URL, srv.s.URL+"/v1/images/files/") {
							t.Fatalf("url result %s", body)
						}
						resp, err := http.Get(*d.URL)
						if err != nil {
							t.Fatal(err)
						}
						file, _ = io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "image/"+c.format {
							t.Fatalf("GET %s: %d %s", *d.URL, resp.StatusCode, resp.Header.Get("Content-Type"))
						}
					} else {
						if d.B64 == nil || d.URL != nil {
							t.Fatalf("b64 result %s", body)
						}
						var err error
						if file, err = base64.StdEncoding.DecodeString(*d.B64); err != nil {
							t.Fatal(err)
						}
					}
					decode := map[string]func(io.Reader) (image.Image, error){"png": png.Decode, "jpeg": jpeg.Decode, "webp": webp.Decode}[c.format]
					img, err := decode(bytes.NewReader(file))
					if err != nil {
						t.Fatal(err)
					}
					if b := img.Bounds(); b.Dx() != c.w || b.Dy() != c.h {
						t.Errorf("image %v, want %d×%d", b, c.w, c.h)
					}
				}
			})
		}
	}
	resp, err := http.Get(local.URL + "/v1/images/files/img-0123")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("an unknown file: %d", resp.StatusCode)
	}
}

// TestImagesBadInput: what the limits and the model refuse is a 400 in
// OpenAI's error shape naming the parameter, locally and forwarded.
func TestImagesBadInput(t *testing.T) {
	_, local, forward := imageServers(t, openai.Options{MaxImageSide: 512, MaxImages: 2, MaxImageSteps: 50})
	for _, c := range []struct{ name, body, param string }{
		{"no prompt", `{"size":"64x64"}`, "prompt"},
		{"empty prompt", `{"prompt":"  ","size":"64x64"}`, "prompt"},
		{"width not a multiple of 16", `{"prompt":"x","width":100,"height":64}`, "width"},
		{"absurd size", `{"prompt":"x","size":"100000x100000"}`, "size"},
		{"over the max side", `{"prompt":"x","width":64,"height":528}`, "height"},
		{"zero height", `{"prompt":"x","width":64,"height":0}`, "height"},
		{"bad size text", `{"prompt":"x","size":"large"}`, "size"},
		{"size and width", `{"prompt":"x","size":"64x64","width":64}`, "size"},
		{"steps 0", `{"prompt":"x","size":"64x64","steps":0}`, "steps"},
		{"steps 10000", `{"prompt":"x","size":"64x64","steps":10000}`, "steps"},
		{"n 3", `{"prompt":"x","size":"64x64","n":3}`, "n"},
		{"n 0", `{"prompt":"x","size":"64x64","n":0}`, "n"},
		{"negative guidance", `{"prompt":"x","size":"64x64","guidance":-1}`, "guidance"},
		{"gif", `{"prompt":"x","size":"64x64","output_format":"gif"}`, "output_format"},
		{"output_compression 101", `{"prompt":"x","size":"64x64","output_format":"webp","output_compression":101}`, "output_compression"},
		{"response format", `{"prompt":"x","size":"64x64","response_format":"png"}`, "response_format"},
		{"unknown model", `{"prompt":"x","size":"64x64","model":"dall-e-9"}`, "model"},
		{"prompt not a string", `{"prompt":5}`, "prompt"},
		{"partial_images 4", `{"prompt":"x","size":"64x64","stream":true,"partial_images":4}`, "partial_images"},
		{"partial_images -1", `{"prompt":"x","size":"64x64","stream":true,"partial_images":-1}`, "partial_images"},
	} {
		for name, s := range map[string]*httptest.Server{"local": local, "forwarded": forward} {
			code, body := postImages(t, s.URL, "/v1/images/generations", c.body)
			var e struct {
				Error struct {
					Type  string  `json:"type"`
					Param *string `json:"param"`
				} `json:"error"`
			}
			json.Unmarshal(body, &e)
			if code != http.StatusBadRequest || e.Error.Type != "invalid_request_error" || e.Error.Param == nil || *e.Error.Param != c.param {
				t.Errorf("%s, %s: %d %s, want a 400 on %q", c.name, name, code, body, c.param)
			}
		}
	}
}

// TestImagesStream: stream=true sends a progress event per step of each
// image, then each image, then [DONE]; a client that goes away stops the
// generation before its next step, also through a forwarding node.
func TestImagesStream(t *testing.T) {
	e, local, forward := imageServers(t, openai.Options{})
	code, body := postImages(t, forward.URL, "/v1/images/generate", `{"prompt":"x","n":2,"width":32,"height":16,"steps":3,"stream":true}`)
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	var types []string
	for _, line := range strings.Split(string(body), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type  string `json:"type"`
			Image int    `json:"image_index"`
			Step  int    `json:"step"`
			B64   string `json:"b64_json"`
		}
		if data == "[DONE]" {
			types = append(types, "done")
			continue
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		types = append(types, fmt.Sprintf("%s:%d:%d", strings.TrimPrefix(ev.Type, "image_generation."), ev.Image, ev.Step))
	}
	want := "progress:0:1 progress:0:2 progress:0:3 progress:1:1 progress:1:2 progress:1:3 completed:0:0 completed:1:0 done"
	if got := strings.Join(types, " "); got != want {
		t.Errorf("events %s\nwant %s", got, want)
	}

	for name, s := range map[string]*httptest.Server{"local": local, "forwarded": forward} {
		t.Run("disconnect "+name, func(t *testing.T) {
			e.stepped.Store(0)
			e.cancelled.Store(false)
			e.stepWait = make(chan struct{})
			defer func() { e.stepWait = nil }()
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/v1/images/generate",
				strings.NewReader(`{"prompt":"x","width":32,"height":32,"steps":50,"stream":true}`))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(resp.Body).ReadString('\n') // the first step's event
			if err != nil || !strings.Contains(line, "progress") {
				t.Fatalf("%q %v", line, err)
			}
			cancel()
			resp.Body.Close()
			deadline := time.Now().Add(30 * time.Second)
			for !e.cancelled.Load() {
				if time.Now().After(deadline) {
					t.Fatal("the generation did not stop")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if n := e.stepped.Load(); n != 1 {
				t.Errorf("%d steps taken after the client left at step 1", n)
			}
		})
	}
}

// TestPythonSDKImages: the official openai client's images.generate,
// b64_json and url, directly and through the forwarding front end.
func TestPythonSDKImages(t *testing.T) {
	py := testenv.Python(t)
	if out, err := exec.Command(py, "-c", "import openai, PIL").CombinedOutput(); err != nil {
		missing(t, "openai or Pillow is not installed in %s: %s", py, out)
	}
	_, local, forward := imageServers(t, openai.Options{})
	env := append(os.Environ(), "FUSION_BASE_URL="+local.URL, "FUSION_FORWARD_URL="+forward.URL, "FUSION_API_KEY="+testKey,
		"FUSION_IMAGE_MODEL="+imageModel)
	out := runSuite(t, env, py, "testdata/openai_images.py")
	t.Log(out)
	if !regexp.MustCompile(`(?m)^ok 6$`).MatchString(out) {
		t.Errorf("unexpected output:\n%s", out)
	}
}

// TestImagesOnNode: on a node whose models dir holds a FLUX.2 checkpoint,
// the model is listed with kind image, /v1/images/generations without a
// model takes it, and a streamed generation reports its steps from the
// runner, then the image: a 32×32 PNG. The official openai client's
// images.generate (b64_json and url) runs against this node and through
// a forwarding member of its cluster.
func TestImagesOnNode(t *testing.T) {
	models := nodetest.Models(t)
	if err := flux2.CreateDemo(filepath.Join(models, "flux"), flux2.TinyDemo()); err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, nodetest.Options{ModelsDir: models, Cluster: nodetest.Member("a", 1, nil)})
	resp, err := http.Get(n.URL() + "/v1/models/flux")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"flux"`) {
		t.Fatalf("GET /v1/models/flux: %d %s", resp.StatusCode, body)
	}
	code, out := postImages(t, n.URL(), "/v1/images/generations", `{"prompt":"a cat","size":"32x32","steps":2,"stream":true}`)
	if code != http.StatusOK || strings.Count(string(out), `"image_generation.progress"`) != 2 || strings.Count(string(out), `"image_generation.completed"`) != 1 {
		t.Fatalf("%d %s", code, out)
	}
	var done struct {
		B64 string `json:"b64_json"`
	}
	for _, line := range strings.Split(string(out), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(data, `"image_generation.completed"`) {
			if err := json.Unmarshal([]byte(data), &done); err != nil {
				t.Fatal(err)
			}
		}
	}
	raw, err := base64.StdEncoding.DecodeString(done.B64)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil || img.Bounds().Dx() != 32 || img.Bounds().Dy() != 32 {
		t.Fatalf("png %v %v", err, img)
	}

	// The official client, on this node and through a forwarding member.
	py := testenv.Python(t)
	if out, err := exec.Command(py, "-c", "import openai, PIL").CombinedOutput(); err != nil {
		missing(t, "openai or Pillow is not installed in %s: %s", py, out)
	}
	fwd := nodetest.Start(t, nodetest.Options{ModelsDir: t.TempDir(), Cluster: nodetest.Member("b", 0, []string{n.Cluster().GossipAddr()})})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(fwd.URL() + "/v1/models/flux")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the forwarding member does not list flux")
		}
	}
	env := append(os.Environ(), "FUSION_BASE_URL="+n.URL(), "FUSION_FORWARD_URL="+fwd.URL(), "FUSION_API_KEY=unused", "FUSION_IMAGE_MODEL=flux")
	if out := runSuite(t, env, py, "testdata/openai_images.py"); !regexp.MustCompile(`(?m)^ok 6$`).MatchString(out) {
		t.Errorf("unexpected output:\n%s", out)
	}
}

// holders counts the nodes whose replicated inventory has model on disk.
func holders(m *cluster.Member, model string) int {
	n := 0
	m.FSM().Read(func(s *fsm.State) {
		for _, nd := range s.Nodes() {
			var inv cluster.Inventory
			if json.Unmarshal(nd.Inventory, &inv) == nil && slices.Contains(inv.ModelsOnDisk, model) {
				n++
			}
		}
	})
	return n
}

// imageEvents splits a streamed generation into its events by type.
func imageEvents(t *testing.T, body []byte) map[string][]map[string]any {
	t.Helper()
	out := map[string][]map[string]any{}
	for _, line := range strings.Split(string(body), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		typ, _ := ev["type"].(string)
		out[typ] = append(out[typ], ev)
	}
	return out
}

// TestImagesAcrossNodes: in a cluster of two nodes that both hold the
// FLUX.2 model, n = 2 runs one image on each node, and the images are
// byte for byte those n = 2 makes on a lone node (the same seed: image 1
// is the second slice of the batch's noise, not another seed). The
// stream reports both images' steps and, with partial_images, a
// half-size preview of each; the url results, kept on the node that
// answered, are served by the other node too (fetched over gRPC), and
// an id of that node it does not keep is a 404.
func TestImagesAcrossNodes(t *testing.T) {
	withFlux := func() string {
		dir := nodetest.Models(t)
		if err := flux2.CreateDemo(filepath.Join(dir, "flux"), flux2.TinyDemo()); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	nodes := nodetest.StartCluster(t, nodetest.Options{ModelsDir: withFlux()}, nodetest.Options{ModelsDir: withFlux()})
	a, b := nodes[0], nodes[1]
	solo := nodetest.Start(t, nodetest.Options{ModelsDir: withFlux()})
	for deadline := time.Now().Add(60 * time.Second); holders(a.Cluster(), "flux") < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("node a does not learn that both nodes hold flux")
		}
	}

	const body = `{"model":"flux","prompt":"a cat","n":2,"size":"32x32","steps":2,"seed":7`
	start := time.Now()
	code, out := postImages(t, a.URL(), "/v1/images/generations", body+`,"stream":true,"partial_images":1,"response_format":"url"}`)
	split := time.Since(start)
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, out)
	}
	for _, n := range []*node.Node{a, b} {
		ms, err := n.Runner().Models(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.IndexFunc(ms, func(m engine.ModelInfo) bool { return m.ID == "flux" }); i < 0 || !ms[i].Loaded {
			t.Errorf("node %s did not make an image (flux not loaded there)", n.Cluster().ID())
		}
	}
	ev := imageEvents(t, out)
	progress := map[float64]int{}
	for _, e := range ev["image_generation.progress"] {
		progress[e["image_index"].(float64)]++
	}
	if progress[0] != 2 || progress[1] != 2 || len(progress) != 2 {
		t.Errorf("steps per image %v, want 2 for each of 2", progress)
	}
	if p := ev["image_generation.partial_image"]; len(p) != 2 {
		t.Errorf("%d partial images, want 1 per image", len(p))
	} else {
		for _, e := range p {
			raw, err := base64.StdEncoding.DecodeString(e["b64_json"].(string))
			if err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(bytes.NewReader(raw))
			if err != nil || img.Bounds().Dx() != 16 || img.Bounds().Dy() != 16 || e["size"] != "16x16" || e["partial_image_index"] != 0.0 {
				t.Errorf("preview %v %v %v", e["size"], e["partial_image_index"], err)
			}
		}
	}
	done := ev["image_generation.completed"]
	if len(done) != 2 {
		t.Fatalf("%d completed events", len(done))
	}
	fromB := make([][]byte, 2)
	for i, e := range done {
		u, err := url.Parse(e["url"].(string))
		if err != nil {
			t.Fatal(err)
		}
		if e["image_index"] != float64(i) {
			t.Errorf("completed event %d is image %v", i, e["image_index"])
		}
		resp, err := http.Get(b.URL() + u.Path) // the node that did not answer
		if err != nil {
			t.Fatal(err)
		}
		fromB[i], _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "image/png" {
			t.Fatalf("GET %s on node b: %d %s", u.Path, resp.StatusCode, fromB[i])
		}
		if i == 0 {
			if !strings.HasPrefix(path.Base(u.Path), "img-"+hex.EncodeToString([]byte("a"))+"-") {
				t.Errorf("url %s does not name node a", u)
			}
			gone := "/v1/images/files/img-" + hex.EncodeToString([]byte("a")) + "-" + strings.Repeat("0", 32) + ".png"
			if code, msg := getStatus(t, b.URL()+gone); code != http.StatusNotFound || !strings.Contains(msg, "file_not_found") {
				t.Errorf("GET %s on node b: %d %s", gone, code, msg)
			}
		}
	}

	start = time.Now()
	code, out = postImages(t, solo.URL(), "/v1/images/generations", body+`}`)
	alone := time.Since(start)
	var one openai.ImagesResponse
	if err := json.Unmarshal(out, &one); code != http.StatusOK || err != nil || len(one.Data) != 2 {
		t.Fatalf("lone node: %d %s", code, out)
	}
	for i, d := range one.Data {
		raw, _ := base64.StdEncoding.DecodeString(*d.B64JSON)
		if !bytes.Equal(raw, fromB[i]) {
			t.Errorf("image %d made across two nodes differs from the lone node's", i)
		}
	}
	t.Logf("n = 2 at 32×32, 2 steps: %v split over two nodes (streamed, previews), %v on one node", split, alone)

	// The official client's stream with partial images, through node b.
	py := testenv.Python(t)
	if out, err := exec.Command(py, "-c", "import openai, PIL").CombinedOutput(); err != nil {
		missing(t, "openai or Pillow is not installed in %s: %s", py, out)
	}
	env := append(os.Environ(), "FUSION_BASE_URL="+b.URL(), "FUSION_API_KEY=unused", "FUSION_IMAGE_MODEL=flux")
	if out := runSuite(t, env, py, "testdata/openai_images_stream.py"); !regexp.MustCompile(`(?m)^ok 1$`).MatchString(out) {
		t.Errorf("unexpected output:\n%s", out)
	}
}

func getStatus(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// fetchEngine is an image engine whose cluster keeps one file on node
// "b" and cannot reach node "down" (nor "a", which it must not be asked
// for).
type fetchEngine struct{ imageEngine }

func (e *fetchEngine) FetchImageFile(_ context.Context, node, id string) (*engine.ImageFile, error) {
	switch {
	case node == "down", node == "a": // a is the handler's own node: never asked
		return nil, fmt.Errorf("%w: node %s is gone", engine.ErrUnavailable, node)
	case node == "b" && id == "img-62-01":
		return &engine.ImageFile{Data: []byte("png"), ContentType: "image/png", Expires: time.Now().Add(time.Minute)}, nil
	}
	return nil, fmt.Errorf("%w: %s", engine.ErrImageFileNotFound, id)
}

// TestImageFileFromPeer: an id naming another node is fetched through the
// engine; a file it does not have is a 404, an unreachable node a 503,
// both in OpenAI's error shape; an id naming this node is not asked for.
func TestImageFileFromPeer(t *testing.T) {
	r := chi.NewRouter()
	openai.New(openai.Config{Engine: &fetchEngine{}, Options: openai.Options{NodeID: "a"}}).Mount(r)
	s := httptest.NewServer(r)
	t.Cleanup(s.Close)
	hexOf := func(node string) string { return hex.EncodeToString([]byte(node)) }
	for _, c := range []struct {
		id   string
		code int
		want string
	}{
		{"img-" + hexOf("b") + "-01.png", http.StatusOK, "png"},
		{"img-" + hexOf("b") + "-02.png", http.StatusNotFound, `"code":"file_not_found"`},
		{"img-" + hexOf("down") + "-01.png", http.StatusServiceUnavailable, `"type":`},
		{"img-" + hexOf("a") + "-01.png", http.StatusNotFound, `"code":"file_not_found"`},
		{"img-zz-01.png", http.StatusNotFound, `"code":"file_not_found"`},
		{"img-0123", http.StatusNotFound, `"code":"file_not_found"`},
	} {
		code, body := getStatus(t, s.URL+"/v1/images/files/"+c.id)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s, want %d with %s", c.id, code, body, c.code, c.want)
		}
	}
}
