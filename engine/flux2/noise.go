package flux2

import "math"

// Generator is torch's CPU generator: an mt19937 engine seeded as
// torch.Generator("cpu").manual_seed(seed) seeds it, with the cached
// second normal of torch's double-precision sampler. It is not safe for
// concurrent use.
type Generator struct {
	mt     [624]uint32
	i      int
	cached *float64 // torch's next_double_normal_sample
}

// NewGenerator returns the generator of manual_seed(seed). torch seeds
// its mt19937 with the low 32 bits of the seed.
func NewGenerator(seed uint64) *Generator {
	g := &Generator{}
	g.mt[0] = uint32(seed)
	for j := 1; j < len(g.mt); j++ {
		p := g.mt[j-1]
		g.mt[j] = 1812433253*(p^(p>>30)) + uint32(j)
	}
	g.i = len(g.mt)
	return g
}

// Uint32 is the engine's next 32-bit output (std::mt19937).
func (g *Generator) Uint32() uint32 {
	const n, m = 624, 397
	if g.i >= n {
		for k := 0; k < n; k++ {
			y := g.mt[k]&0x80000000 | g.mt[(k+1)%n]&0x7fffffff
			v := g.mt[(k+m)%n] ^ y>>1
			if y&1 != 0 {
				v ^= 0x9908b0df
			}
			g.mt[k] = v
		}
		g.i = 0
	}
	y := g.mt[g.i]
	g.i++
	y ^= y >> 11
	y ^= y << 7 & 0x9d2c5680
	y ^= y << 15 & 0xefc60000
	y ^= y >> 18
	return y
}

// uniform32 is at::uniform_real_distribution<float>(0, 1): the low 24
// bits of one output, scaled to [0, 1).
func (g *Generator) uniform32() float32 {
	return float32(g.Uint32()&(1<<24-1)) * (1.0 / (1 << 24))
}

// uniform64 is at::uniform_real_distribution<double>(0, 1): the low 53
// bits of two outputs (the first one high), scaled to [0, 1).
func (g *Generator) uniform64() float64 {
	hi := uint64(g.Uint32())
	lo := uint64(g.Uint32())
	return float64((hi<<32|lo)&(1<<53-1)) * (1.0 / (1 << 53))
}

// normal64 is at::normal_distribution<double>(0, 1): Box–Muller on two
// uniforms, the sine half cached for the next call.
func (g *Generator) normal64() float64 {
	if g.cached != nil {
		v := *g.cached
		g.cached = nil
		return v
	}
	u1 := g.uniform64()
	u2 := g.uniform64()
	r := math.Sqrt(-2 * math.Log1p(-u2))
	theta := 2 * math.Pi * u1
	s := r * math.Sin(theta)
	g.cached = &s
	return r * math.Cos(theta)
}

// Randn returns n float32 standard normals as torch.randn(shape,
// generator=g) does on the CPU for a contiguous float32 tensor of n
// elements. From 16 elements on, torch first fills the tensor with
// uniforms, then turns each block of 16 into normals with Box–Muller
// (u1 from the first 8, u2 from the last 8); when n is not a multiple of
// 16 the last 16 elements are drawn again and transformed once more.
// Below 16 elements every value comes from the double-precision sampler.
func (g *Generator) Randn(n int) []float32 {
	out := make([]float32, n)
	if n < 16 {
		for i := range out {
			out[i] = float32(g.normal64())
		}
		return out
	}
	for i := range out {
		out[i] = g.uniform32()
	}
	for i := 0; i+16 <= n; i += 16 {
		boxMuller16(out[i : i+16])
	}
	if n%16 != 0 {
		tail := out[n-16:]
		for i := range tail {
			tail[i] = g.uniform32()
		}
		boxMuller16(tail)
	}
	return out
}

// boxMuller16 is torch's normal_fill_16 for float: each pair (d[j],
// d[j+8]) of uniforms becomes the pair of normals r·cos θ, r·sin θ with
// r = sqrt(−2·log(1−d[j])) and θ = 2π·d[j+8], in float32 (θ's product
// taken in double and rounded, as the C++ promotes it).
func boxMuller16(d []float32) {
	for j := 0; j < 8; j++ {
		u1 := 1 - d[j]
		u2 := d[j+8]
		radius := sqrtf(-2 * logAVX(u1))
		theta := float32(2*math.Pi) * u2
		sin, cos := sincosAVX(theta)
		d[j] = radius * cos
		d[j+8] = radius * sin
	}
}

// The float32 functions, correctly rounded from float64 (what glibc's
// logf, sinf and cosf return).
func logf(x float32) float32  { return float32(math.Log(float64(x))) }
func sinf(x float32) float32  { return float32(math.Sin(float64(x))) }
func cosf(x float32) float32  { return float32(math.Cos(float64(x))) }
func sqrtf(x float32) float32 { return float32(math.Sqrt(float64(x))) }
