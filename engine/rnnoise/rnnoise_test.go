package rnnoise

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"fusion/engine/audio/audiotest"
	"fusion/engine/backend"
	"fusion/engine/backend/cpu"
	"fusion/engine/rnnoise/rnnoisetest"
)

// refScript runs the reference library argv[1] (pyrnnoise's
// librnnoise.so) through ctypes on the f32 file argv[2] (48 kHz, [−1, 1],
// scaled to 16-bit range as the library expects) and writes into argv[3]:
// per frame, the silence flag of rnn_compute_frame_features after the
// input's high-pass biquad (as rnnoise_process_frame runs them); for the
// frames that are not silent, their features and compute_rnn's gains and
// voice probability (the C kernels, arch 0) from a state that sees only
// those frames, as rnnoise_process_frame's does; and
// rnnoise_process_frame's probabilities and output.
const refScript = `
import ctypes, struct, sys
import numpy as np
lib = ctypes.CDLL(sys.argv[1])
x = np.fromfile(sys.argv[2], dtype="<f4").astype(np.float32) * 32768
out = sys.argv[3]
F, B, N = 480, 32, 65
fp = ctypes.POINTER(ctypes.c_float)
def ptr(a): return a.ctypes.data_as(fp)
lib.rnnoise_create.restype = ctypes.c_void_p
lib.rnnoise_create.argtypes = [ctypes.c_void_p]
lib.rnn_compute_frame_features.argtypes = [ctypes.c_void_p] + [fp] * 7
lib.rnn_biquad.argtypes = [fp] * 5 + [ctypes.c_int]
lib.init_rnnoise.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
lib.compute_rnn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, fp, fp, fp, ctypes.c_int]
lib.rnnoise_process_frame.argtypes = [ctypes.c_void_p, fp, fp]
lib.rnnoise_process_frame.restype = ctypes.c_float
feat_st = lib.rnnoise_create(None)
proc_st = lib.rnnoise_create(None)
model = ctypes.create_string_buffer(1 << 16)
if lib.init_rnnoise(model, ctypes.addressof(ctypes.c_char.in_dll(lib, "rnnoise_arrays"))) != 0:
    raise SystemExit("init_rnnoise failed")
rnn = np.zeros(1 << 14, dtype=np.float32)
mem = np.zeros(2, dtype=np.float32)
b_hp = np.array([-2, 1], dtype=np.float32)
a_hp = np.array([-1.99599, 0.99600], dtype=np.float32)
X = np.zeros(2 * 481, dtype=np.float32); P = np.zeros(2 * 481, dtype=np.float32)
Ex = np.zeros(B, dtype=np.float32); Ep = np.zeros(B, dtype=np.float32); Exp = np.zeros(B, dtype=np.float32)
feats, gains, vads, silent, pvad, y = [], [], [], [], [], []
for i in range(len(x) // F):
    fr = np.ascontiguousarray(x[i * F:(i + 1) * F])
    hp = np.zeros(F, dtype=np.float32)
    lib.rnn_biquad(ptr(hp), ptr(mem), ptr(fr), ptr(b_hp), ptr(a_hp), F)
    f = np.zeros(N, dtype=np.float32)
    s = lib.rnn_compute_frame_features(feat_st, ptr(X), ptr(P), ptr(Ex), ptr(Ep), ptr(Exp), ptr(f), ptr(hp))
    silent.append(s)
    if not s:
        g = np.zeros(B, dtype=np.float32); v = np.zeros(1, dtype=np.float32)
        lib.compute_rnn(model, rnn.ctypes.data, ptr(g), ptr(v), ptr(f), 0)
        feats.append(f); gains.append(g); vads.append(v[0])
    o = np.zeros(F, dtype=np.float32)
    pvad.append(lib.rnnoise_process_frame(proc_st, ptr(o), ptr(fr)))
    y.append(o)
# compute_rnn again in numpy over the library's own linear kernels (the
# layers of the RNNoise struct init_rnnoise filled, 64 bytes each), with
# exact activations (the runtime's are SSE approximations with a 12-bit
# reciprocal, _mm_rcp_ps, whose error depends on the CPU).
lib.rnn_compute_generic_dense.argtypes = [ctypes.c_void_p, fp, fp, ctypes.c_int, ctypes.c_int]
def lin(k, v):
    nin, nout = struct.unpack_from("<ii", model.raw, 64 * k + 56)
    assert len(v) == nin, (k, nin, len(v))
    o = np.zeros(nout, dtype=np.float32); v = np.ascontiguousarray(v, dtype=np.float32)
    lib.rnn_compute_generic_dense(ctypes.addressof(model) + 64 * k, ptr(o), ptr(v), 0, 0)
    return o
def net(tanh, sig):
    m1 = np.zeros(2 * N, np.float32); m2 = np.zeros(256, np.float32); h = [np.zeros(384, np.float32)] * 3
    gs, vs = [], []
    for f in feats:
        t = np.concatenate([m1, f]); c1 = tanh(lin(0, t)); m1 = t[N:]
        t = np.concatenate([m2, c1]); c2 = tanh(lin(1, t)); m2 = t[128:]
        x = c2
        for g in range(3):
            a = lin(2 + 2 * g, x); b = lin(3 + 2 * g, h[g]); H = 384
            z = sig(a[:H] + b[:H]); r = sig(a[H:2 * H] + b[H:2 * H])
            c = tanh(a[2 * H:] + r * b[2 * H:])
            h[g] = (z * h[g] + (1 - z) * c).astype(np.float32); x = h[g]
        cat = np.concatenate([c2] + h)
        gs.append(sig(lin(8, cat))); vs.append(sig(lin(9, cat))[0])
    return np.array(gs, dtype="<f4"), np.array(vs, dtype="<f4")
exact_tanh = lambda v: np.tanh(v.astype(np.float64)).astype(np.float32)
exact_sig = lambda v: (1 / (1 + np.exp(-v.astype(np.float64)))).astype(np.float32)
g, v = net(exact_tanh, exact_sig)
g.tofile(out + "/gains_exact.f32"); v.tofile(out + "/vad_exact.f32")
np.array(feats, dtype="<f4").tofile(out + "/features.f32")
np.array(gains, dtype="<f4").tofile(out + "/gains.f32")
np.array(vads, dtype="<f4").tofile(out + "/vad.f32")
np.array(silent, dtype="<i4").tofile(out + "/silent.i32")
np.array(pvad, dtype="<f4").tofile(out + "/process_vad.f32")
(np.concatenate(y) / 32768).astype("<f4").tofile(out + "/denoised.f32")
`

// reference is the reference runtime's view of a clip.
type reference struct {
	x          []float32 // the clip, 48 kHz in [−1, 1]
	silent     []bool    // per frame
	features   []float32 // the non-silent frames' features
	gains, vad []float32 // compute_rnn's, for those frames
	// gainsExact and vadExact are compute_rnn's with exact tanh and
	// sigmoid: the same layers through the library's linear kernels.
	gainsExact, vadExact []float32
	processVAD           []float32 // rnnoise_process_frame's, per frame
	denoised             []float32 // rnnoise_process_frame's output, in [−1, 1]
}

var ref struct {
	once sync.Once
	r    reference
	err  error
}

// noisyReference is the reference's view of a noisy espeak-ng sentence.
func noisyReference(t *testing.T) reference {
	t.Helper()
	lib := rnnoisetest.Lib(t)
	py := audiotest.Python(t, "numpy")
	ref.once.Do(func() {
		x := rnnoisetest.NoisySpeech(t, "The birch canoe slid on the smooth planks.", 7)
		dir := t.TempDir()
		audiotest.WriteF32(t, filepath.Join(dir, "in.f32"), x)
		if out, err := exec.Command(py, "-c", refScript, lib, filepath.Join(dir, "in.f32"), dir).CombinedOutput(); err != nil {
			ref.err = errors.New(string(out))
			return
		}
		r := reference{x: x,
			features:   audiotest.ReadF32(t, filepath.Join(dir, "features.f32")),
			gains:      audiotest.ReadF32(t, filepath.Join(dir, "gains.f32")),
			vad:        audiotest.ReadF32(t, filepath.Join(dir, "vad.f32")),
			gainsExact: audiotest.ReadF32(t, filepath.Join(dir, "gains_exact.f32")),
			vadExact:   audiotest.ReadF32(t, filepath.Join(dir, "vad_exact.f32")),
			processVAD: audiotest.ReadF32(t, filepath.Join(dir, "process_vad.f32")),
			denoised:   audiotest.ReadF32(t, filepath.Join(dir, "denoised.f32")),
		}
		b, err := os.ReadFile(filepath.Join(dir, "silent.i32"))
		if err != nil {
			ref.err = err
			return
		}
		for i := 0; i+4 <= len(b); i += 4 {
			r.silent = append(r.silent, binary.LittleEndian.Uint32(b[i:]) != 0)
		}
		ref.r = r
	})
	if ref.err != nil {
		t.Fatalf("reference: %v", ref.err)
	}
	return ref.r
}

func maxAbs(a, b []float32) float64 {
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}

// Tolerances of the network's outputs (gains and voice probabilities,
// in [0, 1]). Against the reference's layers with exact activations, only
// summation order and float32 rounding differ. The runtime itself
// computes tanh and sigmoid with rational approximations divided by SSE's
// 12-bit reciprocal estimate (vec_avx.h's tanh4_approx and
// sigmoid4_approx, ~1e-4 relative error), which the three GRUs carry from
// frame to frame: there only a looser bound holds.
const (
	exactTol   = 1e-4
	runtimeTol = 2e-2
)

// TestNetworkMatchesReference runs the network on the reference's
// features of every non-silent frame, in two calls (the state carried
// across), and compares the gains and voice probabilities with
// compute_rnn's.
func TestNetworkMatchesReference(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	networkMatches(t, be)
}

func networkMatches(t *testing.T, be backend.Backend) {
	r := noisyReference(t)
	m, err := Load(be, rnnoisetest.Dir(t))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	n := len(r.vad)
	if n < 100 || len(r.gains) != n*Bands || len(r.features) != n*Features {
		t.Fatalf("reference: %d frames, %d gains, %d features", n, len(r.gains), len(r.features))
	}
	st := NewState()
	cut := 137 // not a multiple of the step size
	g1, v1, err := m.Run(context.Background(), st, r.features[:cut*Features])
	if err != nil {
		t.Fatal(err)
	}
	g2, v2, err := m.Run(context.Background(), st, r.features[cut*Features:])
	if err != nil {
		t.Fatal(err)
	}
	gains, vad := append(g1, g2...), append(v1, v2...)
	for _, c := range []struct {
		name       string
		gains, vad []float32
		tol        float64
	}{
		{"exact activations", r.gainsExact, r.vadExact, exactTol},
		{"runtime (compute_rnn)", r.gains, r.vad, runtimeTol},
	} {
		dg, dv := maxAbs(gains, c.gains), maxAbs(vad, c.vad)
		t.Logf("%s, %d frames: gains max |Δ| %.2g, voice probability max |Δ| %.2g", c.name, n, dg, dv)
		if dg > c.tol || dv > c.tol {
			t.Errorf("%s: gains max |Δ| %.3g, voice probability max |Δ| %.3g (tolerance %g)", c.name, dg, dv, c.tol)
		}
	}
	// The reference's own frame loop computes the same probabilities as
	// its compute_rnn on these features: the features are its own.
	var pv []float32
	for i, s := range r.silent {
		if !s {
			pv = append(pv, r.processVAD[i])
		}
	}
	if d := maxAbs(r.vad, pv); d != 0 {
		t.Errorf("compute_rnn's voice probabilities differ from rnnoise_process_frame's by %.3g", d)
	}
}

// TestFeaturesMatchReference runs the signal processing on the clip and
// compares each frame's silence flag, pitch period and features with
// rnn_compute_frame_features's.
func TestFeaturesMatchReference(t *testing.T) {
	r := noisyReference(t)
	a := analysis{t: newTables()}
	var x [FrameSize]float32
	var f frameFeatures
	var got []float32
	in := make([]float32, len(r.x))
	for i, v := range r.x {
		in[i] = v * 32768
	}
	frames := len(in) / FrameSize
	if frames != len(r.silent) {
		t.Fatalf("%d frames, the reference has %d", frames, len(r.silent))
	}
	silentDiff, pitchDiff := 0, 0
	k := 0
	var worst float64
	for i := range frames {
		biquad(x[:], &a.memHP, in[i*FrameSize:(i+1)*FrameSize], hpB, hpA)
		a.compute(&f, x[:])
		if f.silent != r.silent[i] {
			silentDiff++
			continue
		}
		if f.silent {
			continue
		}
		want := r.features[k*Features : (k+1)*Features]
		if f.features[2*Bands] != want[2*Bands] {
			pitchDiff++
		} else {
			worst = max(worst, maxAbs(f.features[:], want))
		}
		got = append(got, f.features[:]...)
		k++
	}
	t.Logf("%d frames (%d silent): %d silence flags and %d pitch periods differ; features of the others max |Δ| %.2g",
		frames, frames-k, silentDiff, pitchDiff, worst)
	if silentDiff != 0 || pitchDiff != 0 || worst > featureTol {
		t.Errorf("%d silence flags and %d pitch periods differ; features max |Δ| %.3g (tolerance %g)", silentDiff, pitchDiff, worst, featureTol)
	}
}

// featureTol bounds the features' difference (log10 energies and
// correlations through a DCT, values of order 1–10): the reference's
// kiss_fft runs in float32, ours in float64.
const featureTol = 1e-4

// TestSignalPathMatchesReference runs the whole frame loop with the
// reference's gains in place of the network's, so that only the signal
// processing is compared: output samples and the voice probabilities
// passed through.
func TestSignalPathMatchesReference(t *testing.T) {
	r := noisyReference(t)
	in := make([]float32, len(r.x)/FrameSize*FrameSize)
	for i := range in {
		in[i] = r.x[i] * 32768
	}
	d := newDenoiser(newTables())
	k := 0
	out, vad, err := d.process(context.Background(), in, func(feats []float32) ([]float32, []float32, error) {
		n := len(feats) / Features
		g, v := r.gains[k*Bands:(k+n)*Bands], r.vad[k:k+n]
		k += n
		return g, v, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range out {
		out[i] /= 32768
	}
	if k != len(r.vad) {
		t.Fatalf("%d frames went through the network, the reference ran %d", k, len(r.vad))
	}
	silent := 0
	for _, s := range r.silent {
		if s {
			silent++
		}
	}
	if silent < 10 {
		t.Fatalf("only %d silent frames in the clip", silent)
	}
	dy := maxAbs(out, r.denoised[:len(out)])
	t.Logf("%d samples (%d silent frames): output max |Δ| %.2g (full scale 1)", len(out), silent, dy)
	if dy > signalTol {
		t.Errorf("output max |Δ| %.3g (tolerance %g)", dy, signalTol)
	}
	if d := maxAbs(vad, r.processVAD[:len(vad)]); d != 0 {
		t.Errorf("voice probabilities moved by %.3g", d)
	}
}

// signalTol bounds the output samples' difference (full scale 1) when the
// gains are the reference's: only the FFT's precision differs.
const signalTol = 1e-6

// TestDenoiseMatchesReference runs the model end to end (Model.Denoise on
// the CPU backend) and compares its output with rnnoise_process_frame's:
// the difference is the runtime's approximate activations (see
// runtimeTol), bounded relative to the output's energy; and both remove
// most of the noise before the speech.
func TestDenoiseMatchesReference(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	denoiseMatches(t, be)
}

func denoiseMatches(t *testing.T, be backend.Backend) {
	r := noisyReference(t)
	m, err := Load(be, rnnoisetest.Dir(t))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	y, vad, err := m.Denoise(context.Background(), r.x)
	if err != nil {
		t.Fatal(err)
	}
	if len(y) != len(r.x) || len(vad) != (len(r.x)+FrameSize-1)/FrameSize {
		t.Fatalf("%d samples and %d probabilities for %d samples", len(y), len(vad), len(r.x))
	}
	// The reference's output lags by a frame.
	ref := r.denoised[FrameSize:]
	n := len(ref)
	var diff, energy float64
	for i := range n {
		d := float64(y[i]) - float64(ref[i])
		diff += d * d
		energy += float64(ref[i]) * float64(ref[i])
	}
	snr := 10 * math.Log10(energy/diff)
	noiseIn, noiseOut, noiseRef := rms(r.x[12000:48000]), rms(y[12000:48000]), rms(ref[12000:48000])
	t.Logf("%d samples: output vs reference %.1f dB SNR, max |Δ| %.2g; noise RMS %.4f in, %.5f ours, %.5f reference",
		n, snr, maxAbs(y[:n], ref), noiseIn, noiseOut, noiseRef)
	if snr < minSNR {
		t.Errorf("output vs reference: %.1f dB SNR (want ≥ %g dB)", snr, minSNR)
	}
	if noiseOut > noiseIn/10 {
		t.Errorf("noise RMS %.4f in, %.4f out: less than 20 dB removed", noiseIn, noiseOut)
	}
}

// minSNR is the least ratio of the reference output's energy to that of
// our output's difference from it.
const minSNR = 50.0

func rms(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s / float64(len(x)))
}

// TestProcessStreams checks that a stream cut anywhere gives the output
// of the whole: 1.6 s of the clip (the silent lead-in, then noise) in one
// call, and in calls of 37, 100 and 23 frames.
func TestProcessStreams(t *testing.T) {
	r := noisyReference(t)
	be := cpu.New(cpu.Options{})
	defer be.Close()
	m, err := Load(be, rnnoisetest.Dir(t))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	in := make([]float32, 160*FrameSize)
	for i := range in {
		in[i] = r.x[i] * 32768
	}
	ctx := context.Background()
	whole, wholeVAD, err := m.NewDenoiser().Process(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	d := m.NewDenoiser()
	var parts, partsVAD []float32
	lo := 0
	for _, n := range []int{37, 100, 23} {
		y, v, err := d.Process(ctx, in[lo*FrameSize:(lo+n)*FrameSize])
		if err != nil {
			t.Fatal(err)
		}
		parts, partsVAD = append(parts, y...), append(partsVAD, v...)
		lo += n
	}
	// Steps of other sizes may round the network's sums otherwise (they
	// are equal here on the CPU backend): samples are in 16-bit units.
	if dy, dv := maxAbs(parts, whole), maxAbs(partsVAD, wholeVAD); dy > 1e-2 || dv > 1e-6 {
		t.Errorf("cut stream differs from the whole: samples by %.3g, probabilities by %.3g", dy, dv)
	}
	if _, _, err := d.Process(ctx, in[:FrameSize+1]); err == nil {
		t.Error("a partial frame was accepted")
	}
}
