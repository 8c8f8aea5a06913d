package flux2

import (
	"fmt"
	"testing"
)

// TestInitialLatentsMatchPipeline: InitialNoise, Pack and LatentIDs give
// bit for bit the packed latents and the ids Flux2KleinPipeline's
// prepare_latents makes for a seed, for one and two images and for sizes
// it rounds down.
func TestInitialLatentsMatchPipeline(t *testing.T) {
	ref := reference(t)
	cfg := TinyDemo()
	for i, c := range refRequest.Latents {
		want := ref.Latents[i]
		h, w := LatentGrid(c.Width, c.Height, cfg.VAE.ScaleFactor())
		if fmt.Sprint(want.Shape) != fmt.Sprint([]int{c.N, h * w, cfg.Transformer.InChannels}) {
			t.Fatalf("case %d: diffusers' shape %v, ours [%d %d %d]", i, want.Shape, c.N, h*w, cfg.Transformer.InChannels)
		}
		var got []float32
		for _, l := range InitialNoise(NewGenerator(c.Seed), c.N, cfg.Transformer.InChannels, h, w) {
			got = append(got, Pack(l)...)
		}
		sameBits(t, fmt.Sprintf("seed %d %dx%d", c.Seed, c.Width, c.Height), got, want.Bits)
		ids := LatentIDs(h, w)
		for k, id := range ids {
			if [4]int32{id.T, id.H, id.W, id.L} != want.IDs[k] {
				t.Fatalf("case %d: id %d = %v, diffusers %v", i, k, id, want.IDs[k])
			}
		}
	}
}

// TestLatentLayoutMatchesDiffusers: Patchify, Unpatchify, Pack and
// Unpack by ids equal diffusers' static methods on the same randn input.
func TestLatentLayoutMatchesDiffusers(t *testing.T) {
	ref := reference(t)
	for i, c := range refRequest.Layout {
		x := Latents{C: c.Shape[1], H: c.Shape[2], W: c.Shape[3]}
		x.Data = NewGenerator(c.Seed).Randn(x.C * x.H * x.W)
		want := ref.Layout[i]
		p := Patchify(x)
		sameBits(t, "patchified", p.Data, want.Patchified)
		sameBits(t, "unpatchified", Unpatchify(p).Data, want.Unpatchified)
		packed := Pack(p)
		sameBits(t, "packed", packed, want.Packed)
		un, err := Unpack(packed, LatentIDs(p.H, p.W), p.C, p.H, p.W)
		if err != nil {
			t.Fatal(err)
		}
		sameBits(t, "unpacked", un.Data, want.Unpacked)
	}
}

// TestUnpackRejects: tokens that do not fit their ids or the grid are an
// error, not a panic.
func TestUnpackRejects(t *testing.T) {
	for _, c := range []struct {
		tokens []float32
		ids    []PosID
	}{
		{make([]float32, 3), LatentIDs(1, 2)},
		{make([]float32, 4), []PosID{{H: 0}, {H: 2}}},
		{make([]float32, 4), []PosID{{W: -1}, {}}},
	} {
		if _, err := Unpack(c.tokens, c.ids, 2, 2, 1); err == nil {
			t.Errorf("Unpack(%d values, %v) did not fail", len(c.tokens), c.ids)
		}
	}
}

// TestTextIDs: text tokens differ only in the L axis.
func TestTextIDs(t *testing.T) {
	ids := TextIDs(3)
	if ids[0] != (PosID{}) || ids[2] != (PosID{L: 2}) {
		t.Errorf("TextIDs(3) = %v", ids)
	}
}
