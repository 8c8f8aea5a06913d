package flux2

import (
	"fmt"
	"testing"
)

// TestRandnMatchesTorch: our noise is bit for bit torch.randn with a
// seeded CPU generator: below 16 values (torch's double sampler), in
// whole blocks of 16 and with a redrawn tail (its float Box–Muller), and
// for several draws in a row from one generator.
func TestRandnMatchesTorch(t *testing.T) {
	ref := reference(t)
	total := 0
	for ci, c := range refRequest.Randn {
		g := NewGenerator(c.Seed)
		for si, shape := range c.Shapes {
			got := g.Randn(elements(shape))
			total += len(got)
			sameBits(t, fmt.Sprintf("seed %d draw %d %v", c.Seed, si, shape), got, ref.Randn[ci][si])
		}
	}
	t.Logf("%d values compared bit for bit", total)
}

// TestFMAFRoundsOnce: fmaf is a·b + c with one rounding, including when
// the double sum lies exactly halfway between two float32s.
func TestFMAFRoundsOnce(t *testing.T) {
	for _, c := range []struct{ a, b, c, want float32 }{
		{2, 3, 1, 7},
		// a·b = 2^-24 − 2^-60: the double sum rounds to the tie between
		// 1+2^-23 and 1+2^-22, the exact sum lies below it, so the float
		// rounds down (rounding the double again would give the even one).
		{(1 + 1.0/(1<<18)) / (1 << 12), (1 - 1.0/(1<<18)) / (1 << 12), 1 + 1.0/(1<<23), 1 + 1.0/(1<<23)},
		{(1 + 1.0/(1<<18)) / (1 << 12), (1 + 1.0/(1<<18)) / (1 << 12), 1 + 1.0/(1<<23), 1 + 1.0/(1<<22)},
	} {
		if got := fmaf(c.a, c.b, c.c); got != c.want {
			t.Errorf("fmaf(%g, %g, %g) = %g, want %g", c.a, c.b, c.c, got, c.want)
		}
	}
}
