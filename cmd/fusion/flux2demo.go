package main

import (
	"flag"
	"fmt"
	"io"

	"fusion/engine/demo"
	"fusion/engine/flux2"
)

// flux2Arch is create-demo's --arch for a FLUX.2 [klein] image checkpoint.
const flux2Arch = "flux2"

// createFlux2Demo writes flux2.TinyDemo with the seed and, when --dtype
// was given, its dtype (float32 otherwise, what the parity tests use).
func createFlux2Demo(out string, o demo.Options, fs *flag.FlagSet, stdout io.Writer) error {
	d := flux2.TinyDemo()
	d.Seed = o.Seed
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "dtype" {
			d.DType = o.DType
		}
	})
	if err := flux2.CreateDemo(out, d); err != nil {
		return err
	}
	t, v := d.Transformer, d.VAE
	fmt.Fprintf(stdout, "wrote %s: flux2 (Flux2KleinPipeline), transformer %d double + %d single blocks, %d heads of %d; VAE %v, %d latent channels; text encoder qwen3 %d layers, hidden %d; %s\n",
		out, t.NumLayers, t.NumSingleLayers, t.NumAttentionHeads, t.AttentionHeadDim, v.BlockOutChannels, v.LatentChannels,
		d.TextEncoder.Layers, d.TextEncoder.Hidden, d.DType)
	return nil
}
