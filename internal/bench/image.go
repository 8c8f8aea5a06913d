package bench

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"time"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu"
	"fusion/engine/demo"
	"fusion/engine/flux2"
	"fusion/engine/modelfile"
)

//go:embed image_bench.py
var imageBenchScript string

// ImageOptions are the settings of the image generation benchmark.
type ImageOptions struct {
	CacheDir  string   // directory the random checkpoints are written in ("": a temporary one)
	Configs   []string // "tiny" (flux2.TinyDemo) and/or "medium" (imageConfigs)
	Size      int      // width and height in pixels (a multiple of 16)
	Steps     int      // timed denoising steps on each side, after one warm-up step
	Repeat    int      // timed VAE decodes on each side, after a warm-up; the median counts
	Threads   int      // compute threads on both sides (0: all cores)
	Diffusers bool     // run diffusers on the same checkpoints in the same run
	// MLX also runs the MLX backend where libmlxc loads. On by default
	// on macOS only: elsewhere libmlxc runs on MLX's CPU device, minutes
	// per configuration and not what a node would use.
	MLX bool
	// CPUProfile, when set, receives a CPU profile of the last
	// configuration's timed steps on the CPU backend.
	CPUProfile string
}

// DefaultImageOptions are the settings `make bench` uses.
func DefaultImageOptions() ImageOptions {
	return ImageOptions{Configs: []string{"tiny", "medium"}, Size: 256, Steps: 4, Repeat: 2, Diffusers: true, MLX: runtime.GOOS == "darwin"}
}

// imageConfigs are the random checkpoints of the benchmark. medium is a
// scaled-down [klein] (width 512 = 8 heads of 64 against 24 of 128,
// 2 + 4 blocks against 5 + 20, the VAE's widths a quarter, 16 latent
// channels against 32) that takes seconds per step on a 2-core VM.
func imageConfigs(name string) (flux2.DemoOptions, bool) {
	switch name {
	case "tiny":
		return flux2.TinyDemo(), true
	case "medium":
		d := flux2.TinyDemo()
		te := demo.Options{Arch: modelfile.ArchQwen3, Layers: 28, Hidden: 64, Heads: 4, KVHeads: 2, HeadDim: 16, Intermediate: 128, DType: "f32"}
		d.TextEncoder = te
		t := &d.Transformer
		t.InChannels, t.NumLayers, t.NumSingleLayers = 64, 2, 4
		t.AttentionHeadDim, t.NumAttentionHeads, t.JointAttentionDim = 64, 8, 3*te.Hidden
		t.TimestepGuidanceChannels, t.AxesDimsRoPE = 256, []int{16, 16, 16, 16}
		v := &d.VAE
		v.BlockOutChannels, v.LatentChannels, v.NormNumGroups, v.LayersPerBlock = []int{32, 64, 128, 128}, 16, 32, 2
		return d, true
	}
	return flux2.DemoOptions{}, false
}

type imageSide struct {
	StepSeconds   float64   `json:"step_s"`
	Steps         []float64 `json:"steps_s"`
	DecodeSeconds float64   `json:"vae_decode_s"`
	StepGFLOPS    float64   `json:"step_gflop_s"`
	DecodeGFLOPS  float64   `json:"vae_decode_gflop_s"`
	// The process's CPU time (user + system) over all timed steps,
	// divided by their number, and the GFLOP per CPU second it gives:
	// on a shared machine the wall time also counts waiting for a core.
	StepCPUSeconds float64 `json:"step_cpu_s,omitempty"`
	StepGFLOPCPU   float64 `json:"step_gflop_per_cpu_s,omitempty"`
	Error          string  `json:"error,omitempty"`
}

type imageConfigResult struct {
	Double, Single, Inner, MLP int
	JointDim                   int     `json:"joint_attention_dim"`
	VAEChannels                []int   `json:"vae_channels"`
	LatentChannels             int     `json:"latent_channels"`
	ImageTokens                int     `json:"image_tokens"`
	TextTokens                 int     `json:"text_tokens"`
	StepGFLOP                  float64 `json:"step_gflop"`
	DecodeGFLOP                float64 `json:"vae_decode_gflop"`
	// torch's FlopCounterMode over one step and one decode of diffusers:
	// the check of our count.
	TorchStepGFLOP   float64    `json:"torch_counted_step_gflop,omitempty"`
	TorchDecodeGFLOP float64    `json:"torch_counted_vae_decode_gflop,omitempty"`
	CPU              *imageSide `json:"fusion_cpu"`
	MLX              *imageSide `json:"fusion_mlx,omitempty"`
	Diffusers        *imageSide `json:"diffusers,omitempty"`
	StepRatio        float64    `json:"step_ratio,omitempty"`
	// StepCPURatio is the ratio of CPU seconds per step: what the wall
	// ratio would be on an idle machine if both sides kept their cores
	// busy.
	StepCPURatio float64 `json:"step_cpu_ratio,omitempty"`
	DecodeRatio  float64 `json:"vae_decode_ratio,omitempty"`
}

type imageBenchResult struct {
	Size    int                           `json:"size"`
	Threads int                           `json:"threads"`
	Kernels string                        `json:"kernels"`
	Torch   string                        `json:"torch,omitempty"`
	Configs map[string]*imageConfigResult `json:"configs"`
	Note    string                        `json:"note"`
	Error   string                        `json:"error,omitempty"`
}

// Image measures FLUX.2 generation speed: seconds per denoising step
// (one transformer forward over the 256² image's tokens and 512 text
// tokens, plus the Euler step) and per VAE decode on random checkpoints
// written by flux2.CreateDemo, engine/flux2 on the CPU backend (and MLX
// where it loads) against diffusers on torch CPU with the same thread
// count, one side after the other in the same run. Both take the median
// of -steps timed steps after a warm-up step. FLOPs are counted from the
// configuration (flux2.StepFLOPs, DecodeFLOPs) and checked against
// torch's FlopCounterMode; ratios are diffusers / fusion seconds, above
// 1 is faster.
func Image(ctx context.Context, o ImageOptions, stdout, stderr io.Writer) error {
	if o.Size < 16 || o.Size%16 != 0 || o.Steps < 1 || o.Repeat < 1 || o.Threads < 0 || len(o.Configs) == 0 {
		return optionErrorf("-size must be a positive multiple of 16, -steps and -repeat positive, -threads not negative, -configs not empty")
	}
	for _, c := range o.Configs {
		if _, ok := imageConfigs(c); !ok {
			return optionErrorf("-configs: unknown configuration %q (tiny, medium)", c)
		}
	}
	threads := o.Threads
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	cb := cpu.New(cpu.Options{Threads: threads})
	defer cb.Close()
	res := &imageBenchResult{Size: o.Size, Threads: threads, Kernels: cb.Kernels().Level().String(), Configs: map[string]*imageConfigResult{},
		Note: "seconds per denoising step (transformer forward + Euler step; 512 text tokens) and per VAE decode, median after a warm-up, float32 random checkpoints; GFLOP counted from the config (multiply-add = 2); ratios = diffusers seconds / fusion CPU seconds, above 1 is faster; step_cpu_ratio compares CPU seconds per step (on a loaded machine the wall time also counts waiting for a core)"}
	enc := json.NewEncoder(stdout)
	var mb backend.Backend
	mlxErr := ""
	if o.MLX {
		b, err := newMLXBackend()
		if err != nil {
			mlxErr = err.Error()
		} else {
			mb = b
			defer mb.Close()
		}
	}
	dir := o.CacheDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "fusion-bench-image-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	for i, name := range o.Configs {
		d, _ := imageConfigs(name)
		ckpt := filepath.Join(dir, "flux2-"+name)
		if !flux2.IsCheckpoint(ckpt) {
			fmt.Fprintf(stderr, "bench image: writing %s\n", ckpt)
			if err := flux2.CreateDemo(ckpt, d); err != nil {
				return err
			}
		}
		t, v := d.Transformer, d.VAE
		h, w := flux2.LatentGrid(o.Size, o.Size, v.ScaleFactor())
		cr := &imageConfigResult{Double: t.NumLayers, Single: t.NumSingleLayers, Inner: t.Inner(), MLP: t.MLPHidden(),
			JointDim: t.JointAttentionDim, VAEChannels: v.BlockOutChannels, LatentChannels: v.LatentChannels,
			ImageTokens: h * w, TextTokens: imageTextTokens,
			StepGFLOP:   float64(t.StepFLOPs(h*w, imageTextTokens)) / 1e9,
			DecodeGFLOP: float64(v.DecodeFLOPs(o.Size, o.Size)) / 1e9}
		res.Configs[name] = cr
		profile := ""
		if i == len(o.Configs)-1 {
			profile = o.CPUProfile
		}
		fmt.Fprintf(stderr, "bench image: %s on fusion cpu\n", name)
		cr.CPU = runImageFusion(ctx, cb, ckpt, o, profile)
		if o.MLX {
			if mb == nil {
				cr.MLX = &imageSide{Error: "mlx backend: " + mlxErr}
			} else {
				fmt.Fprintf(stderr, "bench image: %s on fusion mlx\n", name)
				cr.MLX = runImageFusion(ctx, mb, ckpt, o, "")
			}
		}
		if o.Diffusers {
			fmt.Fprintf(stderr, "bench image: %s on diffusers\n", name)
			ref, torchVersion, sf, df := runImageDiffusers(ctx, ckpt, o, threads)
			cr.Diffusers, res.Torch = ref, torchVersion
			cr.TorchStepGFLOP, cr.TorchDecodeGFLOP = sf/1e9, df/1e9
			if ref.Error == "" && cr.CPU.Error == "" {
				cr.StepRatio = ref.StepSeconds / cr.CPU.StepSeconds
				cr.DecodeRatio = ref.DecodeSeconds / cr.CPU.DecodeSeconds
				if cr.CPU.StepCPUSeconds > 0 {
					cr.StepCPURatio = ref.StepCPUSeconds / cr.CPU.StepCPUSeconds
				}
			}
		}
		for _, s := range []*imageSide{cr.CPU, cr.MLX, cr.Diffusers} {
			if s != nil && s.Error == "" {
				s.StepGFLOPS = cr.StepGFLOP / s.StepSeconds
				s.DecodeGFLOPS = cr.DecodeGFLOP / s.DecodeSeconds
				if s.StepCPUSeconds > 0 {
					s.StepGFLOPCPU = cr.StepGFLOP / s.StepCPUSeconds
				}
			}
		}
	}
	return enc.Encode(res)
}

// imageTextTokens is the text encoder's sequence the pipeline always
// gives the transformer (max_sequence_length, padded).
const imageTextTokens = 512

// runImageFusion times o.Steps denoising steps and o.Repeat VAE decodes
// of the checkpoint at ckpt on be (each after an untimed warm-up).
func runImageFusion(ctx context.Context, be backend.Backend, ckpt string, o ImageOptions, profile string) *imageSide {
	fail := func(err error) *imageSide { return &imageSide{Error: err.Error()} }
	m, err := flux2.LoadTransformer(be, ckpt)
	if err != nil {
		return fail(err)
	}
	defer m.Close()
	vae, err := flux2.LoadVAE(be, ckpt)
	if err != nil {
		return fail(err)
	}
	defer vae.Close()
	t, v := m.Config(), vae.Config()
	h, w := flux2.LatentGrid(o.Size, o.Size, v.ScaleFactor())
	g := flux2.NewGenerator(0)
	in := flux2.Inputs{
		Image:    flux2.Pack(flux2.InitialNoise(g, 1, t.InChannels, h, w)[0]),
		ImageIDs: flux2.LatentIDs(h, w),
		Text:     g.Randn(imageTextTokens * t.JointAttentionDim),
		TextIDs:  flux2.TextIDs(imageTextTokens),
	}
	sched, err := flux2.NewSchedule(flux2.DefaultSchedulerConfig(), o.Steps, h*w)
	if err != nil {
		return fail(err)
	}
	in.Timestep = sched.Timesteps[0]
	if _, err := m.Forward(ctx, in); err != nil { // warm-up
		return fail(err)
	}
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return fail(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fail(err)
		}
		defer pprof.StopCPUProfile()
	}
	side := &imageSide{}
	cpu0 := processCPU()
	for i, ts := range sched.Timesteps {
		in.Timestep = ts
		start := time.Now()
		vel, err := m.Forward(ctx, in)
		if err != nil {
			return fail(err)
		}
		sched.EulerStep(i, in.Image, vel)
		side.Steps = append(side.Steps, time.Since(start).Seconds())
	}
	side.StepSeconds = median(side.Steps)
	side.StepCPUSeconds = (processCPU() - cpu0).Seconds() / float64(len(side.Steps))
	if profile != "" {
		pprof.StopCPUProfile()
	}
	lat := flux2.Latents{C: v.LatentChannels, H: 2 * h, W: 2 * w, Data: g.Randn(v.LatentChannels * 4 * h * w)}
	var dec []float64
	for i := range o.Repeat + 1 {
		start := time.Now()
		if _, _, _, err := vae.Decode(ctx, lat); err != nil {
			return fail(err)
		}
		if i > 0 {
			dec = append(dec, time.Since(start).Seconds())
		}
	}
	side.DecodeSeconds = median(dec)
	return side
}

// runImageDiffusers runs image_bench.py on the checkpoint; it returns
// diffusers' times, the torch version and torch's FLOP counts of one
// step and one decode.
func runImageDiffusers(ctx context.Context, ckpt string, o ImageOptions, threads int) (side *imageSide, torchVersion string, stepFLOPs, decodeFLOPs float64) {
	var errBuf bytes.Buffer
	cmd := exec.CommandContext(ctx, pythonPath(), "-c", imageBenchScript, ckpt, strconv.Itoa(o.Size), strconv.Itoa(o.Size),
		strconv.Itoa(o.Steps), strconv.Itoa(threads), strconv.Itoa(o.Repeat))
	n := strconv.Itoa(threads)
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS="+n, "MKL_NUM_THREADS="+n)
	cmd.Stderr = &errBuf
	out, err := cmd.Output()
	if err != nil {
		return &imageSide{Error: fmt.Sprintf("diffusers: %v: %s", err, tail(errBuf.String(), 2000))}, "", 0, 0
	}
	var r struct {
		Steps       []float64 `json:"step_seconds"`
		StepCPU     float64   `json:"step_cpu_seconds"`
		Decode      []float64 `json:"decode_seconds"`
		StepFLOPs   float64   `json:"step_flops"`
		DecodeFLOPs float64   `json:"decode_flops"`
		Torch       string    `json:"torch"`
	}
	if err := json.Unmarshal(out, &r); err != nil || len(r.Steps) == 0 || len(r.Decode) == 0 {
		return &imageSide{Error: fmt.Sprintf("diffusers output: %v: %s", err, out)}, "", 0, 0
	}
	return &imageSide{Steps: r.Steps, StepSeconds: median(r.Steps), DecodeSeconds: median(r.Decode), StepCPUSeconds: r.StepCPU}, r.Torch, r.StepFLOPs, r.DecodeFLOPs
}
