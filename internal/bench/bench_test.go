package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"runtime"
	"slices"
	"testing"

	"fusion/engine/model"
	"fusion/engine/modelfile"
)

// TestOptionErrors: options out of range are an *OptionError (a usage
// error to the command) returned before any work starts.
func TestOptionErrors(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		run  func() error
	}{
		{"engine prompt", func() error {
			o := DefaultEngineOptions()
			o.Prompt = 0
			return Engine(ctx, o, io.Discard, io.Discard)
		}},
		{"engine profile of two formats", func() error {
			o := DefaultEngineOptions()
			o.CPUProfile = t.TempDir() + "/cpu.prof"
			return Engine(ctx, o, io.Discard, io.Discard)
		}},
		{"batch decode", func() error {
			o := DefaultBatchOptions()
			o.Decode = 1
			return Batch(ctx, o, io.Discard, io.Discard)
		}},
		{"batch streams", func() error {
			o := DefaultBatchOptions()
			o.Streams = []int{1, 0}
			return Batch(ctx, o, io.Discard, io.Discard)
		}},
		{"pipeline split", func() error {
			o := DefaultPipelineOptions()
			o.Split = "thirds"
			return Pipeline(ctx, o, io.Discard, io.Discard)
		}},
		{"pipeline procs without the binary", func() error {
			_, err := startStageProc(ctx, "", "", model.Range{Start: 1, End: 2}, "", 0, "", "")
			return err
		}},
		{"pipeline link profile", func() error {
			o := DefaultPipelineOptions()
			o.Links = []string{"loopback", "1ms+fast"}
			return Pipeline(ctx, o, io.Discard, io.Discard)
		}},
		{"cache repeat", func() error {
			o := DefaultCacheOptions()
			o.Repeat = 0
			return Cache(ctx, o, io.Discard, io.Discard)
		}},
		{"cache format", func() error {
			o := DefaultCacheOptions()
			o.Format = "q3"
			return Cache(ctx, o, io.Discard, io.Discard)
		}},
		{"tokenizer strings", func() error {
			o := DefaultTokenizerOptions()
			o.Strings = 0
			return Tokenizer(ctx, o, io.Discard)
		}},
		{"server concurrency", func() error {
			o := DefaultServerOptions()
			o.Concurrency = nil
			return Server(ctx, o, io.Discard)
		}},
		{"forward concurrency", func() error {
			o := DefaultForwardOptions()
			o.Concurrency = []int{-1}
			return Forward(ctx, o, io.Discard)
		}},
		{"tokens duration", func() error {
			o := DefaultTokensOptions()
			o.Duration = 0
			return Tokens(ctx, o, io.Discard)
		}},
		{"mlx prompt", func() error {
			o := DefaultMLXOptions()
			o.Prompt = 8
			return MLX(ctx, o, io.Discard, io.Discard)
		}},
		{"mlx layers", func() error {
			o := DefaultMLXOptions()
			o.Layers = 0
			return MLX(ctx, o, io.Discard, io.Discard)
		}},
		{"embed batches", func() error {
			o := DefaultEmbedOptions()
			o.Batches = []int{8, 0}
			return Embed(ctx, o, io.Discard, io.Discard)
		}},
		{"embed backend", func() error {
			o := DefaultEmbedOptions()
			o.Backend = "gpu"
			return Embed(ctx, o, io.Discard, io.Discard)
		}},
		{"whisper repeat", func() error {
			o := DefaultWhisperOptions()
			o.Repeat = 0
			return Whisper(ctx, o, io.Discard, io.Discard)
		}},
		{"speech repeat", func() error {
			o := DefaultSpeechOptions()
			o.Repeat = 0
			return Speech(ctx, o, io.Discard, io.Discard)
		}},
		{"speech threads", func() error {
			o := DefaultSpeechOptions()
			o.Threads = -1
			return Speech(ctx, o, io.Discard, io.Discard)
		}},
		{"whisper nodes", func() error {
			o := DefaultWhisperOptions()
			o.Nodes = -1
			return Whisper(ctx, o, io.Discard, io.Discard)
		}},
		{"image size", func() error {
			o := DefaultImageOptions()
			o.Size = 100
			return Image(ctx, o, io.Discard, io.Discard)
		}},
		{"image configs", func() error {
			o := DefaultImageOptions()
			o.Configs = []string{"huge"}
			return Image(ctx, o, io.Discard, io.Discard)
		}},
		{"raft writers", func() error {
			o := DefaultRaftOptions()
			o.Writers = 0
			return Raft(ctx, o, io.Discard)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			if _, ok := errors.AsType[*OptionError](err); !ok {
				t.Fatalf("got %v (%T), want an *OptionError", err, err)
			}
		})
	}
}

// TestStageBounds: the balanced split gives the last stage, which holds
// the output head, fewer layers, so that no stage reads more weights per
// token than it must; the even split is the plain one.
func TestStageBounds(t *testing.T) {
	sh := demo0p6Shape()
	cfg := modelfile.Config{HiddenSize: sh.Hidden, IntermediateSize: sh.Intermediate, NumHiddenLayers: sh.Layers,
		NumAttentionHeads: sh.Heads, NumKeyValueHeads: sh.KVHeads, HeadDim: sh.HeadDim, VocabSize: 151669}
	head := cfg.HeadLayers()
	for _, tc := range []struct {
		layers, k int
		split     string
		want      []int
	}{
		{12, 2, "even", []int{0, 6, 12}},
		{12, 2, "balanced", []int{0, 11, 12}}, // the head weighs ~9.9 layers
		{6, 2, "balanced", []int{0, 5, 6}},
		{28, 2, "balanced", []int{0, 19, 28}},
		{28, 3, "balanced", []int{0, 13, 25, 28}},
		{6, 1, "balanced", []int{0, 6}},
	} {
		if got := stageBounds(tc.layers, tc.k, tc.split, head); !slices.Equal(got, tc.want) {
			t.Errorf("%d layers in %d stages, %s: %v, want %v", tc.layers, tc.k, tc.split, got, tc.want)
		}
	}
}

// TestBenchImageSmoke runs the image benchmark (`fusion bench image`) on
// the tiny checkpoint at 64×64 for one step, our side only: the JSON
// has the step and decode times, the FLOPs counted from the config and
// the rates they give.
func TestBenchImageSmoke(t *testing.T) {
	o := DefaultImageOptions()
	o.Configs, o.Size, o.Steps, o.Repeat, o.Threads = []string{"tiny"}, 64, 1, 1, 1
	o.Diffusers, o.MLX, o.CacheDir = false, false, t.TempDir()
	var out bytes.Buffer
	if err := Image(context.Background(), o, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var res imageBenchResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%s: %v", out.Bytes(), err)
	}
	c := res.Configs["tiny"]
	if res.Error != "" || c == nil || c.CPU == nil || c.CPU.Error != "" {
		t.Fatalf("failed: %s", out.Bytes())
	}
	if c.ImageTokens != 16 || c.TextTokens != 512 || len(c.CPU.Steps) != 1 || c.CPU.StepSeconds <= 0 || c.CPU.DecodeSeconds <= 0 ||
		c.StepGFLOP <= 0 || c.DecodeGFLOP <= 0 || c.CPU.StepGFLOPS <= 0 || c.CPU.DecodeGFLOPS <= 0 || c.Diffusers != nil || c.MLX != nil {
		t.Errorf("figures: %s", out.Bytes())
	}
	if runtime.GOOS == "linux" && (c.CPU.StepCPUSeconds <= 0 || c.CPU.StepGFLOPCPU <= 0) {
		t.Errorf("no CPU time: %s", out.Bytes())
	}
}
