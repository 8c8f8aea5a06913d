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

// TestMT19937Standard: the engine is std::mt19937: from the default seed
// 5489 its first output is 3499211612 and its 10000th 4123659995 (the
// C++ standard's check), without Python.
func TestMT19937Standard(t *testing.T) {
	g := NewGenerator(5489)
	if v := g.Uint32(); v != 3499211612 {
		t.Errorf("first output %d", v)
	}
	var v uint32
	for i := 1; i < 10000; i++ {
		v = g.Uint32()
	}
	if v != 4123659995 {
		t.Errorf("10000th output %d", v)
	}
}
