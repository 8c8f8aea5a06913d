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
