package piper

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
)

// TestSpeakMatchesPiperTTS synthesizes a two-sentence text end to end and
// compares each sentence's 16-bit samples with piper-tts's
// PiperVoice.synthesize (noise scales 0, its default peak normalization):
// same sentence count and lengths, samples within 2 LSB.
func TestSpeakMatchesPiperTTS(t *testing.T) {
	v, model := loadJoe(t)
	py, data := referencePython(t)
	const text = "Hi. Glue it!"
	script := `
import json, sys
from piper import PiperVoice, SynthesisConfig
v = PiperVoice.load(sys.argv[1])
cfg = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0, length_scale=1.0)
print(json.dumps([c.audio_int16_array.tolist() for c in v.synthesize(sys.argv[2], syn_config=cfg)]))
`
	out, err := exec.Command(py, "-c", script, model, text).Output()
	if err != nil {
		t.Fatalf("piper-tts: %v", err)
	}
	var want [][]int16
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	var got [][]int16
	err = v.Speak(context.Background(), Espeak{DataDir: data}, text, Scales{Length: 1}, nil, func(s Sentence) error {
		got = append(got, PCM16(s.Samples))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d sentences, piper-tts %d", len(got), len(want))
	}
	for i := range got {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("sentence %d: %d samples, piper-tts %d", i, len(got[i]), len(want[i]))
		}
		worst := 0
		for j, s := range got[i] {
			worst = max(worst, abs(int(s)-int(want[i][j])))
		}
		t.Logf("sentence %d: %d samples, max |ours − piper-tts| %d LSB", i, len(got[i]), worst)
		if worst > 2 {
			t.Errorf("sentence %d differs by %d LSB", i, worst)
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
