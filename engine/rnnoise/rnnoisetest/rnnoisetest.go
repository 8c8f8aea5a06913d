// Package rnnoisetest holds what the RNNoise tests share: the model
// fixture, the reference library, and noisy 48 kHz espeak-ng speech.
package rnnoisetest

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"fusion/engine/audio"
	"fusion/engine/audio/audiotest"
	"fusion/engine/audio/resample"
	"fusion/internal/testenv"
)

// SampleRate is the rate RNNoise works at.
const SampleRate = 48000

func need(t testing.TB, path, what string) string {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		msg := "%s not found at %s (run scripts/fixtures.sh)"
		if testenv.Required() {
			t.Fatalf(msg, what, path)
		}
		t.Skipf(msg, what, path)
	}
	return path
}

// Dir returns the model directory of RNNoise 0.2 (the weights of
// pyrnnoise 0.4.5's library as a blob, written by scripts/fixtures.sh into
// models/rnnoise); the test fails or skips as missing fixtures do.
func Dir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(testenv.FixturesDir(), "models", "rnnoise")
	need(t, filepath.Join(dir, ".sha256"), "RNNoise fixture")
	return dir
}

// Lib returns the path of pyrnnoise 0.4.5's librnnoise.so, the reference
// runtime (scripts/fixtures.sh copies it into ref/).
func Lib(t testing.TB) string {
	t.Helper()
	return need(t, filepath.Join(testenv.FixturesDir(), "ref", "librnnoise.so"), "reference librnnoise.so")
}

// NoisySpeech is espeak-ng speech of text at 48 kHz, with a second of
// silence before it and half a second after, mixed with seeded white
// noise of RMS 0.02 and a 100 Hz hum of amplitude 0.02 that start after
// the first quarter second, which is digital silence (samples in
// [−1, 1]).
func NoisySpeech(t testing.TB, text string, seed uint64) []float32 {
	t.Helper()
	ctx := context.Background()
	sig, err := audio.Decode(ctx, bytes.NewReader(audiotest.EspeakWAV(t, text)), audio.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := audio.Mono(sig)
	r, err := resample.New(m.Rate, SampleRate, resample.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	speech, err := r.Resample(ctx, m.Samples)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, SampleRate+len(speech)+SampleRate/2)
	copy(x[SampleRate:], speech)
	rng := rand.New(rand.NewPCG(seed, 24))
	for i := SampleRate / 4; i < len(x); i++ {
		hum := 0.02 * math.Sin(2*math.Pi*100*float64(i)/SampleRate)
		x[i] += float32(0.02*rng.NormFloat64() + hum)
	}
	return x
}
