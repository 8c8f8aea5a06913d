package flux2

import (
	"fmt"
	"testing"
)

// TestRoPETablesMatchDiffusers: the rotary tables of text and image
// position ids equal Flux2PosEmbed's, on the tiny config's axes and on
// FLUX.2 [klein]'s (4 × 32, text positions up to 511). Both sides
// compute in float64 and round once; a 1-ulp difference of the two
// libms' cos/sin could survive the rounding, so up to 1 ulp is allowed
// and the figure is logged.
func TestRoPETablesMatchDiffusers(t *testing.T) {
	ref := reference(t)
	for i, c := range refRequest.RoPE {
		ids := make([]PosID, len(c.IDs))
		for k, r := range c.IDs {
			ids[k] = PosID{T: r[0], H: r[1], W: r[2], L: r[3]}
		}
		cos, sin := RoPETables(ids, c.Axes, c.Theta)
		for _, x := range []struct {
			name string
			got  []float32
			want []uint32
		}{{"cos", cos, ref.RoPE[i].Cos}, {"sin", sin, ref.RoPE[i].Sin}} {
			if len(x.got) != len(x.want) {
				t.Fatalf("case %d %s: %d values, diffusers %d", i, x.name, len(x.got), len(x.want))
			}
			ulps, abs := maxULP(x.got, x.want)
			t.Logf("axes %v %s: max %d ulp, max abs %.3g", c.Axes, x.name, ulps, abs)
			if ulps > 1 {
				t.Errorf("axes %v %s: %d ulp from diffusers", c.Axes, x.name, ulps)
			}
		}
	}
}

// TestTimestepEmbeddingMatchesDiffusers: the timestep the model embeds
// (t/1000·1000 in float32) is bit for bit the pipeline's, and its
// sinusoidal projection is within 1.25e-4 absolute of diffusers'
// Timesteps: torch evaluates exp with its own vectorized float32 routine,
// whose frequency can be 1 ulp off the correctly rounded one we use, and
// t·freq near t = 1000 then moves by an ulp of 1000 (6.1e-5), which sin
// and cos pass on (two such ulps allowed).
func TestTimestepEmbeddingMatchesDiffusers(t *testing.T) {
	ref := reference(t)
	for i, c := range refRequest.Temb {
		var ts, emb []float32
		for _, v := range c.T {
			m := ModelTimestep(v)
			ts = append(ts, m)
			emb = append(emb, TimestepEmbedding(m, c.Channels)...)
		}
		sameBits(t, fmt.Sprintf("case %d model timesteps", i), ts, ref.Temb[i].T)
		ulps, abs := maxULP(emb, ref.Temb[i].Emb)
		t.Logf("%d channels: max %d ulp, max abs %.3g", c.Channels, ulps, abs)
		if abs > 1.25e-4 {
			t.Errorf("%d channels: %.3g from diffusers", c.Channels, abs)
		}
	}
}
