// Package resample converts a signal between sample rates with a
// band-limited polyphase filter: a Kaiser-windowed sinc, designed from a
// stated passband edge, stopband edge and stopband attenuation, evaluated
// at the exact rational positions out/in reduces to (L/M). The output
// sample m is the input interpolated at time m·in/out (zero phase: no
// delay), the input is taken as zero outside its ends, and a signal of n
// samples gives round(n·out/in) samples — the conventions of soxr, which
// the tests compare against.
package resample

import (
	"context"
	"fmt"
	"math"
)

// Spec states the filter. Frequencies are fractions of the lower of the
// two Nyquist frequencies (min(in, out)/2).
type Spec struct {
	// Passband is where the passband ends (response within the
	// attenuation's ripple of 1 below it). Default 0.913, as soxr's.
	Passband float64
	// Stopband is where the stopband begins. Default 1.0: nothing above
	// the lower Nyquist frequency survives to alias.
	Stopband float64
	// AttenuationDB is the stopband attenuation. Default 120 dB.
	AttenuationDB float64
}

// DefaultSpec is the filter New uses for a zero Spec.
var DefaultSpec = Spec{Passband: 0.913, Stopband: 1.0, AttenuationDB: 120}

// MaxPhases is the most filter phases computed exactly. A rate pair whose
// reduced up-factor L is larger (44101 Hz → 16 kHz has L = 16000)
// interpolates linearly between MaxPhases+1 phases; the error of that is
// below 1e-6 of full scale.
const MaxPhases = 1024

// MaxTaps caps the filter length per output sample (a steep filter at a
// large rate ratio); New refuses a Spec needing more.
const MaxTaps = 1 << 14

// Resampler converts from one rate to another. It is immutable after New
// and safe for concurrent use.
type Resampler struct {
	in, out int
	l, m    int64 // out/in reduced: up by l, down by m
	half    int   // taps on each side of the interpolated position
	phases  int   // rows in table (exact: l; interpolated: MaxPhases+1)
	exact   bool
	table   []float64 // phases rows of 2*half coefficients
}

// New designs the filter for inRate → outRate.
func New(inRate, outRate int, spec Spec) (*Resampler, error) {
	if spec == (Spec{}) {
		spec = DefaultSpec
	}
	if inRate <= 0 || outRate <= 0 {
		return nil, fmt.Errorf("resample: rates must be positive, got %d → %d", inRate, outRate)
	}
	if !(spec.Passband > 0 && spec.Passband < spec.Stopband && spec.Stopband <= 1.5) || spec.AttenuationDB < 20 {
		return nil, fmt.Errorf("resample: invalid spec %+v (need 0 < passband < stopband <= 1.5, attenuation >= 20 dB)", spec)
	}
	g := gcd(inRate, outRate)
	r := &Resampler{in: inRate, out: outRate, l: int64(outRate / g), m: int64(inRate / g)}
	if inRate == outRate {
		return r, nil
	}
	// Frequencies in cycles per input sample.
	nyq := float64(min(inRate, outRate)) / 2 / float64(inRate)
	fc := (spec.Passband + spec.Stopband) / 2 * nyq
	df := (spec.Stopband - spec.Passband) * nyq
	a := spec.AttenuationDB
	beta := kaiserBeta(a)
	// Kaiser's length estimate, in input samples.
	taps := (a-7.95)/(2.285*2*math.Pi*df) + 1
	if taps > MaxTaps {
		return nil, fmt.Errorf("resample: %d → %d Hz with %+v needs %.0f taps, the limit is %d", inRate, outRate, spec, taps, MaxTaps)
	}
	r.half = int(math.Ceil(taps / 2))
	r.exact = r.l <= MaxPhases
	nphase := int(r.l)
	if !r.exact {
		nphase = MaxPhases + 1
	}
	r.phases = nphase
	r.table = make([]float64, nphase*2*r.half)
	i0b := besselI0(beta)
	for p := range nphase {
		var frac float64
		if r.exact {
			frac = float64(p) / float64(r.l)
		} else {
			frac = float64(p) / MaxPhases
		}
		row := r.table[p*2*r.half : (p+1)*2*r.half]
		for j := range row {
			d := frac + float64(r.half-1-j) // distance from the input sample to the output position
			row[j] = 2 * fc * sinc(2*fc*d) * kaiser(d/float64(r.half), beta, i0b)
		}
	}
	return r, nil
}

// OutputLen is the number of samples Resample returns for n input samples:
// n·out/in rounded to nearest.
func (r *Resampler) OutputLen(n int) int {
	return int((2*int64(n)*r.l + r.m) / (2 * r.m))
}

// Resample filters x (one channel) to the output rate.
func (r *Resampler) Resample(ctx context.Context, x []float32) ([]float32, error) {
	if r.in == r.out {
		return append([]float32(nil), x...), nil
	}
	n := len(x)
	y := make([]float32, r.OutputLen(n))
	w := 2 * r.half
	for o := range y {
		if o%8192 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		num := int64(o) * r.m
		i := int(num / r.l) // input sample at or before the output position
		rem := num % r.l
		k0 := i - r.half + 1 // first input sample under the filter
		lo, hi := max(0, -k0), min(w, n-k0)
		if lo >= hi {
			continue
		}
		xs := x[k0+lo : k0+hi]
		if r.exact {
			y[o] = float32(dot(xs, r.table[int(rem)*w+lo:int(rem)*w+hi]))
			continue
		}
		pos := float64(rem) / float64(r.l) * MaxPhases
		q := int(pos)
		a := pos - float64(q)
		y0 := dot(xs, r.table[q*w+lo:q*w+hi])
		y1 := dot(xs, r.table[(q+1)*w+lo:(q+1)*w+hi])
		y[o] = float32(y0 + a*(y1-y0))
	}
	return y, nil
}

func dot(x []float32, h []float64) float64 {
	h = h[:len(x)]
	var s0, s1 float64
	i := 0
	for ; i+1 < len(x); i += 2 {
		s0 += float64(x[i]) * h[i]
		s1 += float64(x[i+1]) * h[i+1]
	}
	if i < len(x) {
		s0 += float64(x[i]) * h[i]
	}
	return s0 + s1
}

func sinc(x float64) float64 {
	if x == 0 {
		return 1
	}
	return math.Sin(math.Pi*x) / (math.Pi * x)
}

// kaiser is the Kaiser window at t in [-1, 1] (0 outside).
func kaiser(t, beta, i0b float64) float64 {
	if t < -1 || t > 1 {
		return 0
	}
	return besselI0(beta*math.Sqrt(1-t*t)) / i0b
}

// kaiserBeta is Kaiser's empirical β for a stopband attenuation in dB.
func kaiserBeta(a float64) float64 {
	switch {
	case a > 50:
		return 0.1102 * (a - 8.7)
	case a >= 21:
		return 0.5842*math.Pow(a-21, 0.4) + 0.07886*(a-21)
	}
	return 0
}

// besselI0 is the modified Bessel function of the first kind, order 0,
// by its power series (converges for every x; β ≤ ~20 here).
func besselI0(x float64) float64 {
	sum, term := 1.0, 1.0
	q := x * x / 4
	for k := 1; k < 500; k++ {
		term *= q / float64(k*k)
		sum += term
		if term < sum*1e-17 {
			break
		}
	}
	return sum
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
