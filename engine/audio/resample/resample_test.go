package resample

import (
	"context"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"fusion/engine/audio/audiotest"
)

// sweep is a linear sine sweep from f0 to f1 Hz over n samples at rate,
// amplitude 0.5.
func sweep(rate, n int, f0, f1 float64) []float32 {
	x := make([]float32, n)
	dur := float64(n) / float64(rate)
	for i := range x {
		t := float64(i) / float64(rate)
		x[i] = float32(0.5 * math.Sin(2*math.Pi*(f0*t+(f1-f0)*t*t/(2*dur))))
	}
	return x
}

func noise(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 7))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(0.3 * r.NormFloat64())
	}
	return x
}

// soxr resamples x with python-soxr at its default (HQ) quality.
func soxr(t *testing.T, x []float32, in, out int) []float32 {
	t.Helper()
	py := audiotest.Python(t, "soxr", "numpy")
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "in.f32"), filepath.Join(dir, "out.f32")
	audiotest.WriteF32(t, src, x)
	script := `import sys, numpy as np, soxr
x = np.fromfile(sys.argv[1], dtype="<f4")
soxr.resample(x, int(sys.argv[3]), int(sys.argv[4])).astype("<f4").tofile(sys.argv[2])`
	if o, err := exec.Command(py, "-c", script, src, dst, strconv.Itoa(in), strconv.Itoa(out)).CombinedOutput(); err != nil {
		t.Fatalf("soxr: %v\n%s", err, o)
	}
	return audiotest.ReadF32(t, dst)
}

// diff returns the max and RMS of a-b over [from, len-from).
func diff(a, b []float32, from int) (maxd, rms float64) {
	var ss float64
	n := 0
	for i := from; i < len(a)-from; i++ {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		maxd = max(maxd, d)
		ss += d * d
		n++
	}
	return maxd, math.Sqrt(ss / float64(n))
}

// TestMatchesSoxr resamples sweeps and noise from the common rates to
// 16 kHz and compares with soxr (HQ). The sweeps stay inside both
// filters' passbands (to 0.85 of the lower Nyquist), where two good
// resamplers must agree; white noise also has energy in the transition
// band (0.913–1.0 of Nyquist), where the two filter designs legitimately
// differ, so its bound is looser. At the integer ratios (48k, 8k) the two
// agree to float32 rounding; at 22.05k and 44.1k soxr interpolates its
// filter phases and is itself 2.8e-4 off the exact sweep while we are
// 2e-7 off (TestExactSweep), which sets the bound there. The bounds are
// about twice what was measured (see DESIGN.md).
func TestMatchesSoxr(t *testing.T) {
	cases := []struct {
		in                 int
		sweepMax, sweepRMS float64
		noiseMax, noiseRMS float64
	}{
		{8000, 1e-6, 2e-7, 5e-3, 1.5e-3},
		{22050, 6e-4, 1e-4, 5e-3, 1.5e-3},
		{44100, 6e-4, 1e-4, 5e-3, 1.5e-3},
		{48000, 1e-6, 2e-7, 5e-3, 1.5e-3},
	}
	for _, c := range cases {
		t.Run(strconv.Itoa(c.in), func(t *testing.T) {
			r, err := New(c.in, 16000, Spec{})
			if err != nil {
				t.Fatal(err)
			}
			n := c.in * 2
			low := float64(min(c.in, 16000)) / 2
			for _, s := range []struct {
				name     string
				x        []float32
				max, rms float64
			}{
				{"sweep", sweep(c.in, n, 20, 0.85*low), c.sweepMax, c.sweepRMS},
				{"noise", noise(uint64(c.in), n), c.noiseMax, c.noiseRMS},
			} {
				ours, err := r.Resample(context.Background(), s.x)
				if err != nil {
					t.Fatal(err)
				}
				ref := soxr(t, s.x, c.in, 16000)
				if len(ours) != len(ref) {
					t.Fatalf("%s: %d samples, soxr gives %d", s.name, len(ours), len(ref))
				}
				// The ends, where each treats the signal's edges its own way,
				// are left out: one filter length.
				md, rms := diff(ours, ref, r.half*16000/c.in+1)
				t.Logf("%d→16000 %s: max |Δ| %.3g, RMS Δ %.3g (signal RMS %.3g)", c.in, s.name, md, rms, rmsOf(ref))
				if md > s.max || rms > s.rms {
					t.Errorf("%s: max |Δ| %.3g (bound %.3g), RMS %.3g (bound %.3g)", s.name, md, s.max, rms, s.rms)
				}
			}
		})
	}
}

func rmsOf(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s / float64(len(x)))
}

// TestExactSweep compares with the exact answer, independent of any
// reference: a sweep inside the passband resampled must equal the same
// analytic sweep evaluated at the output times. 44101 Hz exercises the
// interpolated phases (L = 16000 > MaxPhases).
func TestExactSweep(t *testing.T) {
	for _, in := range []int{8000, 22050, 44100, 44101, 48000, 96000} {
		r, err := New(in, 16000, Spec{})
		if err != nil {
			t.Fatal(err)
		}
		n := in * 2
		f1 := 0.85 * float64(min(in, 16000)) / 2
		x := sweep(in, n, 20, f1)
		y, err := r.Resample(context.Background(), x)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float32, len(y))
		dur := float64(n) / float64(in)
		for i := range want {
			tt := float64(i) / 16000
			want[i] = float32(0.5 * math.Sin(2*math.Pi*(20*tt+(f1-20)*tt*tt/(2*dur))))
		}
		md, rms := diff(y, want, r.half*16000/in+1)
		t.Logf("%d→16000: max |Δ| vs the exact sweep %.3g, RMS %.3g (exact phases: %v)", in, md, rms, r.exact)
		if md > 1e-6 {
			t.Errorf("%d: max |Δ| %.3g vs the exact sweep, want <= 1e-6", in, md)
		}
	}
}

// TestStopband: tones between 8 kHz (the output's Nyquist) and the
// input's Nyquist come out at least 60 dB down (the design says 120);
// a tone at 7 kHz (passband) keeps its level within 0.001 dB.
func TestStopband(t *testing.T) {
	for _, c := range []struct {
		in    int
		tones []float64
	}{
		{22050, []float64{8100, 9000, 10000, 11000}},
		{44100, []float64{8100, 9000, 12000, 16000, 20000}},
		{48000, []float64{8100, 10000, 15999, 23000}},
	} {
		r, err := New(c.in, 16000, Spec{})
		if err != nil {
			t.Fatal(err)
		}
		level := func(f float64) float64 {
			x := make([]float32, c.in)
			for i := range x {
				x[i] = float32(0.5 * math.Sin(2*math.Pi*f*float64(i)/float64(c.in)))
			}
			y, err := r.Resample(context.Background(), x)
			if err != nil {
				t.Fatal(err)
			}
			edge := r.half*16000/c.in + 1
			return 20 * math.Log10(rmsOf(y[edge:len(y)-edge])/rmsOf(x))
		}
		for _, f := range c.tones {
			db := level(f)
			t.Logf("%d Hz input, %.0f Hz tone: %.1f dB", c.in, f, db)
			if db > -60 {
				t.Errorf("%d Hz input: a %.0f Hz tone is only %.1f dB down, want <= -60", c.in, f, db)
			}
		}
		if db := level(7000); math.Abs(db) > 0.001 {
			t.Errorf("%d Hz input: a 7 kHz tone changed level by %.4f dB", c.in, db)
		}
	}
}

func TestNewAndEdges(t *testing.T) {
	for _, c := range []struct {
		in, out int
		spec    Spec
	}{
		{0, 16000, Spec{}},
		{16000, -1, Spec{}},
		{48000, 16000, Spec{Passband: 1, Stopband: 0.9, AttenuationDB: 100}},
		{48000, 16000, Spec{Passband: 0.9, Stopband: 1, AttenuationDB: 5}},
		{48000, 16000, Spec{Passband: 0.9999, Stopband: 1, AttenuationDB: 150}}, // too many taps
	} {
		if _, err := New(c.in, c.out, c.spec); err == nil {
			t.Errorf("New(%d, %d, %+v) accepted", c.in, c.out, c.spec)
		}
	}
	r, err := New(16000, 16000, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	x := noise(1, 100)
	if y, _ := r.Resample(context.Background(), x); len(y) != 100 || y[7] != x[7] {
		t.Fatal("same rate must copy")
	}
	r, _ = New(48000, 16000, Spec{})
	for n, want := range map[int]int{0: 0, 1: 0, 2: 1, 3: 1, 1000: 333, 1001: 334} {
		if got := r.OutputLen(n); got != want {
			t.Errorf("OutputLen(%d) = %d, want %d", n, got, want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Resample(ctx, x); err == nil {
		t.Fatal("cancelled context: no error")
	}
}

// BenchmarkTo16k: 30 s of audio at each input rate to 16 kHz.
func BenchmarkTo16k(b *testing.B) {
	for _, in := range []int{8000, 22050, 44100, 48000} {
		b.Run(strconv.Itoa(in), func(b *testing.B) {
			r, _ := New(in, 16000, Spec{})
			x := noise(1, 30*in)
			for b.Loop() {
				if _, err := r.Resample(context.Background(), x); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
