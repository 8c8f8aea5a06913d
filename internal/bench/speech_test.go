package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"fusion/internal/race"
	"fusion/internal/testenv"
)

// TestBenchSpeechSmoke runs `bench speech` on one short sentence, CPU
// backend only: both sides report a real-time factor, and our 16-bit
// samples have piper-tts's sentence lengths and lie within 2 LSB of its.
// Under -race, loading the voice alone takes ~9 s (its element loops
// instrumented), so the race pass skips it and `make test` runs it in its
// non-race step with the TTS round trip (~8 s there).
func TestBenchSpeechSmoke(t *testing.T) {
	if race.Enabled {
		t.Skip("slow under -race; make test runs it without -race")
	}
	dir := testenv.PiperVoiceDir(t, "piper-joe-medium")
	t.Setenv("FUSION_PYTHON", testenv.Python(t))
	o := DefaultSpeechOptions()
	o.Voice, o.Text, o.MLX = dir, "Hi.", false
	var out bytes.Buffer
	if err := Speech(context.Background(), o, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var res speechBenchResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, out.Bytes())
	}
	if res.Error != "" || res.CPU == nil || res.CPU.Error != "" {
		t.Fatalf("errors: %s", out.Bytes())
	}
	if res.Sentences != 1 || res.AudioSeconds <= 0 || res.RefRTF <= 0 || res.CPU.AudioSPerS <= 0 || res.CPU.Ratio <= 0 {
		t.Errorf("missing figures: %s", out.Bytes())
	}
	if !res.CPU.SameSentence || res.CPU.MaxDiffLSB < 0 || res.CPU.MaxDiffLSB > 2 {
		t.Errorf("samples differ from piper-tts's: %s", out.Bytes())
	}
	if res.MLX != nil {
		t.Errorf("MLX measured with MLX off: %s", out.Bytes())
	}
	t.Logf("%.2f s of audio; fusion %.2f audio-s/s, piper-tts %.2f, max diff %d LSB", res.AudioSeconds, res.CPU.AudioSPerS, res.RefRTF, res.CPU.MaxDiffLSB)
}
