package logmel

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"fusion/engine/audio"
	"fusion/engine/audio/audiotest"
)

// refJob is one reference computation: transformers'
// WhisperFeatureExtractor on x (16 kHz) with mels bins. Path "np" is its
// float64 numpy path on x as given (mode "full") or padded to 30 s (mode
// "window"); "torch" is what calling the extractor returns with torch
// installed (float32 torch.stft), window mode only.
type refJob struct {
	x                []float32
	mels             int
	mode, path, name string
	out              []float32
}

// reference runs every job in one Python process (importing transformers
// and torch once).
func reference(t *testing.T, jobs []*refJob) {
	t.Helper()
	py := audiotest.Python(t, "transformers", "numpy")
	dir := t.TempDir()
	var args []string
	for i, j := range jobs {
		src := filepath.Join(dir, strconv.Itoa(i)+".in")
		audiotest.WriteF32(t, src, j.x)
		args = append(args, src, src+".out", strconv.Itoa(j.mels), j.mode, j.path)
	}
	script := `import sys, numpy as np
from transformers import WhisperFeatureExtractor
fes = {}
a = sys.argv[1:]
for i in range(0, len(a), 5):
    src, dst, mels, mode, path = a[i:i+5]
    x = np.fromfile(src, dtype="<f4")
    fe = fes.setdefault(mels, WhisperFeatureExtractor(feature_size=int(mels)))
    if path == "np":
        if mode == "window":
            x = np.pad(x[:fe.n_samples], (0, max(0, fe.n_samples - len(x))))
        y = fe._np_extract_fbank_features(x[None, :], "cpu")[0]
    else:
        y = fe(x, sampling_rate=16000, return_tensors="np").input_features[0]
    np.asarray(y, dtype="<f4").tofile(dst)`
	if o, err := exec.Command(py, append([]string{"-c", script}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("reference: %v\n%s", err, o)
	}
	for i, j := range jobs {
		j.out = audiotest.ReadF32(t, filepath.Join(dir, strconv.Itoa(i)+".in.out"))
	}
}

// espeak synthesizes text with espeak-ng and returns it decoded by
// package audio and brought to 16 kHz mono by its resampler.
func espeak(t *testing.T, text string) []float32 {
	t.Helper()
	data := audiotest.EspeakWAV(t, text)
	sig, err := audio.Decode(context.Background(), bytes.NewReader(data), audio.Options{})
	if err != nil {
		t.Fatal(err)
	}
	x, err := audio.Mono16k(context.Background(), sig)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func synthetic(seconds float64) []float32 {
	r := rand.New(rand.NewPCG(5, 6))
	n := int(seconds * SampleRate)
	x := make([]float32, n)
	for i := range x {
		tt := float64(i) / SampleRate
		x[i] = float32(0.3*math.Sin(2*math.Pi*(100*tt+300*tt*tt)) + 0.1*math.Sin(2*math.Pi*3000*tt) + 0.02*r.NormFloat64())
	}
	return x
}

// TestMatchesWhisperFeatureExtractor compares with transformers'
// WhisperFeatureExtractor on synthetic signals, silence and espeak-ng
// speech, 80 and 128 mel bins, one 30-s window and whole signals: against
// its float64 numpy path max |Δ| <= 1e-6 (measured 1.2e-7, one float32
// rounding), against the torch (float32) path it returns by default max
// |Δ| <= 1e-4 (measured 4.8e-5).
func TestMatchesWhisperFeatureExtractor(t *testing.T) {
	e80, err := New(80)
	if err != nil {
		t.Fatal(err)
	}
	e128, _ := New(128)
	long := espeak(t, "This is a much longer passage of synthetic speech, spoken slowly by the espeak engine. "+
		"It goes on past thirty seconds, so the feature extractor must cut it to one window of three thousand frames. "+
		"Numbers like three hundred and forty two, and names like Ada Lovelace and Alan Turing, help fill the time.")
	for len(long) < 40*SampleRate {
		long = append(long, long...)
	}
	clips := []struct {
		name string
		x    []float32
	}{
		{"synthetic 5 s", synthetic(5)},
		{"speech", espeak(t, "The quick brown fox jumps over the lazy dog. Whisper should hear every word of this sentence.")},
		{"silence", make([]float32, 16000)},
		{"speech 40 s", long[:40*SampleRate]},
		{"tiny 150 samples", synthetic(150.0 / SampleRate)},
	}
	var jobs []*refJob
	var ours []Features
	for _, c := range clips {
		for _, e := range []*Extractor{e80, e128} {
			for _, mode := range []string{"window", "full"} {
				if mode == "full" && len(c.x) < NFFT/2+1 {
					continue // numpy's reflect pad needs more samples than the pad
				}
				var got Features
				if mode == "window" {
					got, err = e.Window(context.Background(), c.x)
				} else {
					got, err = e.Features(context.Background(), c.x)
				}
				if err != nil {
					t.Fatal(err)
				}
				paths := []string{"np"}
				if mode == "window" && c.name != "synthetic 5 s" {
					paths = append(paths, "torch")
				}
				for _, path := range paths {
					jobs = append(jobs, &refJob{x: c.x, mels: e.Mels(), mode: mode, path: path, name: c.name})
					ours = append(ours, got)
				}
			}
		}
	}
	reference(t, jobs)
	for i, j := range jobs {
		got := ours[i]
		if len(j.out) != len(got.Data) {
			t.Fatalf("%s %d mels %s: %d values, reference %d", j.name, j.mels, j.mode, len(got.Data), len(j.out))
		}
		var md float64
		for k := range j.out {
			md = max(md, math.Abs(float64(j.out[k])-float64(got.Data[k])))
		}
		bound := 1e-6
		if j.path == "torch" {
			bound = 1e-4
		}
		t.Logf("%s, %d mels, %s vs the %s path: %d frames, max |Δ| %.3g", j.name, j.mels, j.mode, j.path, got.Frames, md)
		if md > bound {
			t.Errorf("%s, %d mels, %s vs the %s path: max |Δ| %.3g > %.0e", j.name, j.mels, j.mode, j.path, md, bound)
		}
	}
}

func TestShapesAndErrors(t *testing.T) {
	e, _ := New(80)
	f, err := e.Window(context.Background(), synthetic(1))
	if err != nil || f.Mels != 80 || f.Frames != ChunkFrames || len(f.Data) != 80*3000 {
		t.Fatalf("Window: %d×%d, %v", f.Mels, f.Frames, err)
	}
	if f, _ := e.Features(context.Background(), synthetic(2.5)); f.Frames != 250 {
		t.Fatalf("2.5 s: %d frames, want 250", f.Frames)
	}
	for _, m := range []int{0, -1, 513} {
		if _, err := New(m); err == nil {
			t.Errorf("New(%d) accepted", m)
		}
	}
	if _, err := e.Features(context.Background(), make([]float32, 100)); err == nil {
		t.Error("100 samples: no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Window(ctx, nil); err == nil {
		t.Error("cancelled: no error")
	}
	for i, want := range map[int]int{-3: 3, -1: 1, 0: 0, 9: 9, 10: 8, 12: 6, 19: 1, -20: 2} {
		if got := reflect(i, 10); got != want {
			t.Errorf("reflect(%d, 10) = %d, want %d", i, got, want)
		}
	}
}

// BenchmarkWindow: one 30-s window of 80 mels (3000 frames).
func BenchmarkWindow(b *testing.B) {
	e, _ := New(80)
	x := synthetic(30)
	b.SetBytes(int64(len(x) * 4))
	for b.Loop() {
		if _, err := e.Window(context.Background(), x); err != nil {
			b.Fatal(err)
		}
	}
}
