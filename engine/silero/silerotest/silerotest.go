// Package silerotest holds what the Silero VAD tests share: the model
// fixture and espeak-ng speech with pauses between sentences.
package silerotest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"fusion/engine/audio"
	"fusion/engine/audio/audiotest"
	"fusion/internal/testenv"
)

// Dir returns the model directory of Silero VAD v6
// (silero_vad_v6.onnx as faster-whisper ships it, copied by
// scripts/fixtures.sh into models/silero-vad); the test fails or skips as
// missing fixtures do.
func Dir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(testenv.FixturesDir(), "models", "silero-vad")
	if _, err := os.Stat(filepath.Join(dir, ".sha256")); err != nil {
		msg := "Silero VAD fixture not found in %s (run scripts/fixtures.sh)"
		if testenv.Required() {
			t.Fatalf(msg, dir)
		}
		t.Skipf(msg, dir)
	}
	return dir
}

// SpeechWithPauses is 16 kHz mono espeak-ng speech of each text, with
// pauses[i] seconds of silence before text i and pauses[len(texts)]
// after the last (len(pauses) = len(texts)+1).
func SpeechWithPauses(t testing.TB, texts []string, pauses []float64) []float32 {
	t.Helper()
	var out []float32
	for i, p := range pauses {
		out = append(out, make([]float32, int(p*audio.SpeechRate))...)
		if i == len(texts) {
			break
		}
		sig, err := audio.Decode(context.Background(), bytes.NewReader(audiotest.EspeakWAV(t, texts[i])), audio.Options{})
		if err != nil {
			t.Fatal(err)
		}
		x, err := audio.Mono16k(context.Background(), sig)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, x...)
	}
	return out
}
