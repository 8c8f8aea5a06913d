package bench

import (
	"context"
	"errors"
	"io"
	"testing"
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
		{"whisper repeat", func() error {
			o := DefaultWhisperOptions()
			o.Repeat = 0
			return Whisper(ctx, o, io.Discard, io.Discard)
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
