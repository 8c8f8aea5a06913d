//go:build cgo

package piper

import (
	"context"
	"testing"

	"fusion/engine/backend/mlx"
	"fusion/internal/testenv"
)

// TestSynthesizeOnMLX runs the voice on the MLX backend (MLX's CPU device
// here, Metal on a Mac) in float32 mode: the frame counts must be the CPU
// backend's and the waveform within 1e-4 of it (which TestVoiceMatchesONNX
// checks against onnxruntime).
func TestSynthesizeOnMLX(t *testing.T) {
	testenv.NeedMLX(t, mlx.Available())
	cpuVoice, _ := loadJoe(t)
	sents, err := Espeak{}.Phonemize(context.Background(), cpuVoice.Config.Espeak.Voice, "Hi.")
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := cpuVoice.Config.IDs(sents[0])
	want, err := cpuVoice.Synthesize(context.Background(), ids, Scales{Length: 0.5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	be, err := mlx.New(mlx.Options{Float32: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	_, dir := joeConfig(t)
	v, err := Load(context.Background(), dir, be)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	got, err := v.Synthesize(context.Background(), ids, Scales{Length: 0.5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d samples on MLX, %d on the CPU", len(got), len(want))
	}
	d := maxAbsDiff(got, widen64(want))
	t.Logf("%d samples, max |MLX − CPU| %.3g", len(got), d)
	if d > 1e-4 {
		t.Errorf("MLX and CPU waveforms differ by up to %.3g", d)
	}
}

func widen64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}
