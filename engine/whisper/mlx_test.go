//go:build cgo

package whisper

import (
	"context"
	"os"
	"slices"
	"testing"

	"fusion/engine/backend/mlx"
)

// TestTranscribeOnMLX runs the model on the MLX backend (MLX's CPU device
// here, Metal on a Mac) in float32 mode: its greedy transcript must be the
// CPU backend's token for token (which TestTranscriptsMatchFasterWhisper
// checks against faster-whisper). Native mode (float16 activations, what
// a Mac runs) is not run here: the mlx-cpu wheel's float16 products have
// no BLAS and would take minutes per window.
func TestTranscribeOnMLX(t *testing.T) {
	if err := mlx.Available(); err != nil {
		if os.Getenv("FUSION_REQUIRE_MLX") == "1" {
			t.Fatalf("FUSION_REQUIRE_MLX=1 and MLX is unavailable: %v", err)
		}
		t.Skipf("MLX unavailable: %v", err)
	}
	cpuModel := loadTinyEn(t)
	text := clips[0].text
	x := speech16k(t, text)
	want, err := cpuModel.Transcribe(context.Background(), x, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, f32 := range []bool{true} {
		be, err := mlx.New(mlx.Options{Float32: f32})
		if err != nil {
			t.Fatal(err)
		}
		m, err := Load(context.Background(), tinyEn.dir, be)
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.Transcribe(context.Background(), x, DefaultOptions())
		m.Close()
		be.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("float32 %v: %q, WER %.3f", f32, got.Text, wer(text, got.Text))
		if !f32 {
			continue
		}
		if len(got.Segments) != len(want.Segments) {
			t.Fatalf("%d segments, the CPU backend %d", len(got.Segments), len(want.Segments))
		}
		for i, s := range got.Segments {
			if !slices.Equal(s.Tokens, want.Segments[i].Tokens) || s.Start != want.Segments[i].Start || s.End != want.Segments[i].End {
				t.Errorf("segment %d: MLX %+v, CPU %+v", i, s, want.Segments[i])
			}
		}
	}
}
