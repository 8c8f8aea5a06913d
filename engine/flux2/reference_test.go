package flux2

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"fusion/engine/audio/audiotest"
)

// The diffusers side of every parity test comes from one run of
// testdata/reference.py (importing torch and diffusers takes most of the
// time), on the request below and a tiny checkpoint written by
// CreateDemo.

type randnCase struct {
	Seed   uint64    `json:"seed"`
	Shapes [][]int64 `json:"shapes"`
}

type latentsCase struct {
	Seed          uint64 `json:"seed"`
	N             int    `json:"n"`
	Width, Height int
}

func (c latentsCase) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{"seed": c.Seed, "n": c.N, "width": c.Width, "height": c.Height})
}

type layoutCase struct {
	Seed  uint64 `json:"seed"`
	Shape []int  `json:"shape"` // [1, C, H, W]
}

type scheduleCase struct {
	Steps int    `json:"steps"`
	Seq   int    `json:"seq"`
	Ch    int    `json:"ch"` // channels of the stepped latents (fewer for long schedules: test time)
	Seed  uint64 `json:"seed"`
}

type ropeCase struct {
	Theta float64    `json:"theta"`
	Axes  []int      `json:"axes"`
	IDs   [][4]int32 `json:"ids"`
}

type tembCase struct {
	T        []float32 `json:"t"`
	Channels int       `json:"channels"`
}

// forwardCase is one transformer forward: the initial latents of a
// size×size image for Seed, Text tokens of randn hidden states drawn with
// TextSeed, scheduler timestep T.
type forwardCase struct {
	Size     int     `json:"size"`
	Seed     uint64  `json:"seed"`
	Text     int     `json:"text"`
	TextSeed uint64  `json:"text_seed"`
	T        float32 `json:"t"`
}

// denoiseCase is the pipeline's loop of Steps steps from the initial
// latents of a size×size image for Seed, with Text tokens of randn
// prompt embeddings drawn with TextSeed.
type denoiseCase struct {
	Size     int    `json:"size"`
	Seed     uint64 `json:"seed"`
	Text     int    `json:"text"`
	TextSeed uint64 `json:"text_seed"`
	Steps    int    `json:"steps"`
}

// textCase is a prompt through the text encoder, padded or truncated to
// MaxLen tokens.
type textCase struct {
	Prompt string `json:"prompt"`
	MaxLen int    `json:"max_len"`
}

// generateCase is a whole generation from a prompt up to the latents.
type generateCase struct {
	Prompt string `json:"prompt"`
	N      int    `json:"n"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
	Steps  int    `json:"steps"`
	Seed   uint64 `json:"seed"`
}

type demoCase struct {
	Dir    string `json:"dir"`
	Prompt string `json:"prompt"`
	Size   int    `json:"size"`
	Steps  int    `json:"steps"`
	Seed   uint64 `json:"seed"`
}

var refRequest = struct {
	Randn    []randnCase    `json:"randn"`
	Demo     demoCase       `json:"demo"`
	Latents  []latentsCase  `json:"latents"`
	Layout   []layoutCase   `json:"layout"`
	Schedule []scheduleCase `json:"schedule"`
	RoPE     []ropeCase     `json:"rope"`
	Temb     []tembCase     `json:"temb"`
	Forward  []forwardCase  `json:"forward"`
	Denoise  []denoiseCase  `json:"denoise"`
	Image    []denoiseCase  `json:"image"`
	Text     []textCase     `json:"text"`
	Generate []generateCase `json:"generate"`
	// BF16 is a whole generation on the demo written in bf16.
	BF16 struct {
		Dir      string         `json:"dir"`
		Generate []generateCase `json:"generate"`
	} `json:"bf16"`
	// Quant is the demo with its transformer MLX affine quantized
	// (QuantDemo), against diffusers on the dequantized weights.
	Quant struct {
		Dir     string        `json:"dir"`
		Forward []forwardCase `json:"forward"`
		Denoise []denoiseCase `json:"denoise"`
	} `json:"quant"`
}{
	Randn: []randnCase{
		{Seed: 0, Shapes: [][]int64{{1}, {2}, {7}, {15}}},             // torch's double sampler
		{Seed: 42, Shapes: [][]int64{{16}, {17}, {31}, {2, 8, 4, 4}}}, // float Box–Muller, redrawn tails
		{Seed: 1234567, Shapes: [][]int64{{3}, {100}, {1, 128, 8, 8}}},
		{Seed: 1<<32 + 5, Shapes: [][]int64{{64}}}, // only the low 32 bits seed the engine
		{Seed: math.MaxUint64, Shapes: [][]int64{{4, 16, 4, 4}}},
	},
	Demo: demoCase{Prompt: "a red fox in the snow", Size: 64, Steps: 2, Seed: 7},
	Latents: []latentsCase{
		{Seed: 0, N: 1, Width: 64, Height: 64},
		{Seed: 99, N: 2, Width: 128, Height: 64},
		{Seed: 3, N: 1, Width: 80, Height: 48}, // not multiples of 16·… : rounded down
	},
	Layout: []layoutCase{{Seed: 5, Shape: []int{1, 4, 8, 8}}, {Seed: 6, Shape: []int{1, 3, 4, 10}}},
	Schedule: []scheduleCase{
		{Steps: 1, Seq: 16, Ch: 16, Seed: 1}, {Steps: 2, Seq: 256, Ch: 16, Seed: 2}, {Steps: 4, Seq: 16, Ch: 16, Seed: 3},
		{Steps: 4, Seq: 1024, Ch: 16, Seed: 4}, {Steps: 28, Seq: 4096, Ch: 1, Seed: 5}, {Steps: 50, Seq: 9216, Ch: 1, Seed: 6},
	},
	RoPE: []ropeCase{
		{Theta: 2000, Axes: []int{4, 4, 4, 4}, IDs: idRows(append(TextIDs(3), LatentIDs(2, 3)...))},
		// FLUX.2 [klein]'s real axes, text positions up to 511 and a 64×64 grid's corner.
		{Theta: 2000, Axes: []int{32, 32, 32, 32}, IDs: idRows(append(TextIDs(512)[500:], PosID{H: 63, W: 63}, PosID{T: 10, H: 5, W: 7}))},
	},
	Temb: []tembCase{{T: []float32{1000, 987.6543, 750.25, 3.2, 0}, Channels: 32}, {T: []float32{999.1, 512}, Channels: 256}},
	Forward: []forwardCase{
		{Size: 64, Seed: 11, Text: 5, TextSeed: 12, T: 1000},
		{Size: 80, Seed: 13, Text: 3, TextSeed: 14, T: 437.5},
	},
	Denoise: []denoiseCase{{Size: 64, Seed: 21, Text: 4, TextSeed: 22, Steps: 2}, {Size: 48, Seed: 23, Text: 6, TextSeed: 24, Steps: 4}},
	Image:   []denoiseCase{{Size: 64, Seed: 25, Text: 4, TextSeed: 26, Steps: 4}},
	Text: []textCase{
		{Prompt: "a red fox in the snow", MaxLen: DefaultMaxSequenceLength},
		{Prompt: "Ein Fuchs im Schnee, 雪の中の狐 🦊", MaxLen: 64},
		{Prompt: "a very long prompt that the tokenizer truncates to sixteen tokens, chat template and all", MaxLen: 16},
	},
	Generate: []generateCase{{Prompt: "a lighthouse at dusk", N: 2, Width: 64, Height: 32, Steps: 2, Seed: 31}},
}

func init() {
	refRequest.BF16.Generate = []generateCase{{Prompt: "an orange cat on a windowsill", N: 1, Width: 64, Height: 64, Steps: 2, Seed: 41}}
	refRequest.Quant.Forward = []forwardCase{refRequest.Forward[0]}
	refRequest.Quant.Denoise = []denoiseCase{refRequest.Denoise[0]}
}

// BF16Demo is TinyDemo with every weight in bf16; QuantDemo is TinyDemo
// (same seed, so the same text encoder and VAE) with its transformer's
// linear layers 4-bit MLX affine quantized in groups of 32.
func BF16Demo() DemoOptions {
	o := TinyDemo()
	o.DType = "bf16"
	return o
}

func QuantDemo() DemoOptions {
	o := TinyDemo()
	o.Quantize, o.GroupSize = 4, 32
	return o
}

func idRows(ids []PosID) [][4]int32 {
	out := make([][4]int32, len(ids))
	for i, id := range ids {
		out[i] = [4]int32{id.T, id.H, id.W, id.L}
	}
	return out
}

type refReply struct {
	Randn [][][]uint32 `json:"randn"`
	Demo  struct {
		Transformer map[string][]string `json:"transformer"`
		VAE         map[string][]string `json:"vae"`
		Warnings    []string            `json:"warnings"`
		Classes     map[string]string   `json:"classes"`
		ImageShape  []int               `json:"image_shape"`
		ImageFinite bool                `json:"image_finite"`
		ImageStd    float64             `json:"image_std"`
	} `json:"demo"`
	Latents []struct {
		Shape []int      `json:"shape"`
		Bits  []uint32   `json:"bits"`
		IDs   [][4]int32 `json:"ids"`
	} `json:"latents"`
	Layout []struct {
		Patchified, Unpatchified, Packed, Unpacked []uint32
	} `json:"layout"`
	Schedule []struct {
		Mu        float64  `json:"mu"`
		Sigmas    []uint32 `json:"sigmas"`
		Timesteps []uint32 `json:"timesteps"`
		Final     []uint32 `json:"final"`
	} `json:"schedule"`
	RoPE []struct {
		Cos []uint32 `json:"cos"`
		Sin []uint32 `json:"sin"`
	} `json:"rope"`
	Temb []struct {
		T   []uint32 `json:"t"`
		Emb []uint32 `json:"emb"`
	} `json:"temb"`
	Forward []forwardReply `json:"forward"`
	Denoise []stepsReply   `json:"denoise"`
	Image   []imageReply   `json:"image"`
	Text    []struct {
		IDs    []int    `json:"ids"`
		Real   int      `json:"real"`
		Embeds []uint32 `json:"embeds"`
	} `json:"text"`
	Generate []struct {
		Steps   int        `json:"steps"`
		Latents [][]uint32 `json:"latents"`
	} `json:"generate"`
	BF16  []imageReply `json:"bf16"` // no NP
	Quant struct {
		Quantized int            `json:"quantized"` // modules diffusers' side dequantized
		Forward   []forwardReply `json:"forward"`
		Denoise   []stepsReply   `json:"denoise"`
	} `json:"quant"`
}

// forwardReply is one transformer forward's output.
type forwardReply struct {
	Out []uint32 `json:"out"`
}

// stepsReply is a denoising loop's packed latents after its last step.
type stepsReply struct {
	Steps   int      `json:"steps"`
	Latents []uint32 `json:"latents"`
}

// imageReply is a generation's final packed latents and its image.
type imageReply struct {
	Steps   int      `json:"steps"`
	Latents []uint32 `json:"latents"`
	Shape   []int    `json:"shape"` // [height, width, 3]
	NP      []uint32 `json:"np"`    // output_type="np": [height, width, 3] in [0, 1]
	PIL     []int    `json:"pil"`   // the PIL image's bytes, row-major RGB
}

var (
	refOnce  sync.Once
	refValue refReply
	refErr   error
	refDir   string

	pyOnce sync.Once
	pyPath string // the reference Python, once it imported torch and diffusers
)

// refPython returns the Python with torch and diffusers, checking the
// imports once (a check takes tens of seconds): when they fail, every
// test skips, or fails under FUSION_REQUIRE_FIXTURES=1.
func refPython(t *testing.T) string {
	t.Helper()
	pyOnce.Do(func() { pyPath = audiotest.Python(t, "torch", "diffusers") })
	if pyPath == "" {
		return audiotest.Python(t, "torch", "diffusers")
	}
	return pyPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if refDir != "" {
		os.RemoveAll(refDir)
	}
	os.Exit(code)
}

// reference returns diffusers' answers, computing them on first use.
func reference(t *testing.T) *refReply {
	t.Helper()
	py := refPython(t)
	refOnce.Do(func() {
		refDir, refErr = os.MkdirTemp("", "flux2-ref-")
		if refErr != nil {
			return
		}
		req := refRequest
		req.Demo.Dir = filepath.Join(refDir, "demo")
		req.BF16.Dir, req.Quant.Dir = filepath.Join(refDir, "bf16"), filepath.Join(refDir, "quant")
		for _, c := range []struct {
			dir string
			o   DemoOptions
		}{{req.Demo.Dir, TinyDemo()}, {req.BF16.Dir, BF16Demo()}, {req.Quant.Dir, QuantDemo()}} {
			if refErr = CreateDemo(c.dir, c.o); refErr != nil {
				return
			}
		}
		in, _ := json.Marshal(req)
		cmd := exec.Command(py, filepath.Join("testdata", "reference.py"), string(in))
		out, err := cmd.Output()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				err = fmt.Errorf("%w\n%s", err, ee.Stderr)
			}
			refErr = fmt.Errorf("reference.py: %w", err)
			return
		}
		refErr = json.Unmarshal(out, &refValue)
	})
	if refErr != nil {
		t.Fatal(refErr)
	}
	return &refValue
}

// sameBits compares float32 values with torch's bit patterns and reports
// the first differences; it returns how many differ.
func sameBits(t *testing.T, what string, got []float32, want []uint32) int {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d values, diffusers %d", what, len(got), len(want))
		return len(want)
	}
	diff := 0
	for i, v := range got {
		if math.Float32bits(v) != want[i] {
			if diff < 5 {
				t.Errorf("%s[%d] = %v (%#08x), diffusers %v (%#08x)", what, i, v, math.Float32bits(v), math.Float32frombits(want[i]), want[i])
			}
			diff++
		}
	}
	return diff
}

// maxULP returns the largest distance in units in the last place between
// got and torch's values, and the largest absolute difference.
func maxULP(got []float32, want []uint32) (ulps int64, abs float64) {
	for i, v := range got {
		w := math.Float32frombits(want[i])
		abs = max(abs, math.Abs(float64(v-w)))
		a, b := int64(int32(math.Float32bits(v))), int64(int32(want[i]))
		if a < 0 {
			a = math.MinInt32 - a
		}
		if b < 0 {
			b = math.MinInt32 - b
		}
		d := a - b
		if d < 0 {
			d = -d
		}
		ulps = max(ulps, d)
	}
	return ulps, abs
}

func elements(shape []int64) int {
	n := 1
	for _, d := range shape {
		n *= int(d)
	}
	return n
}
