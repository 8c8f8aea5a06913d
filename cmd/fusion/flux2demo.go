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

// createFlux2Demo writes flux2.TinyDemo with the seed and, when given,
// --dtype (float32 otherwise, what the parity tests use) and --quantize
// bits of MLX affine quantization of the transformer (--group-size, 32
// unless given: the tiny transformer is 32 wide).
func createFlux2Demo(out string, o demo.Options, fs *flag.FlagSet, stdout io.Writer) error {
	d := flux2.TinyDemo()
	d.Seed = o.Seed
	d.GroupSize = 32
	var err error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "dtype":
			d.DType = o.DType
		case "quantize":
			d.Quantize = o.Quantize
		case "group-size":
			d.GroupSize = o.GroupSize
		case "quant":
			if o.QuantMode != "affine" {
				err = usagef("--arch flux2 quantizes in affine mode only, not %q", o.QuantMode)
			}
		}
	})
	if err != nil {
		return err
	}
	if err := flux2.CreateDemo(out, d); err != nil {
		return err
	}
	t, v := d.Transformer, d.VAE
	quant := ""
	if d.Quantize != 0 {
		quant = fmt.Sprintf(", transformer affine %d-bit, group %d", d.Quantize, d.GroupSize)
	}
	fmt.Fprintf(stdout, "wrote %s: flux2 (Flux2KleinPipeline), transformer %d double + %d single blocks, %d heads of %d; VAE %v, %d latent channels; text encoder qwen3 %d layers, hidden %d; %s%s\n",
		out, t.NumLayers, t.NumSingleLayers, t.NumAttentionHeads, t.AttentionHeadDim, v.BlockOutChannels, v.LatentChannels,
		d.TextEncoder.Layers, d.TextEncoder.Hidden, d.DType, quant)
	return nil
}
