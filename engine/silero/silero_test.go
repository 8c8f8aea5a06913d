package silero

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"fusion/engine/audio/audiotest"
	"fusion/engine/backend"
	"fusion/engine/backend/cpu"
	"fusion/engine/silero/silerotest"
	"fusion/internal/testenv"
)

// refScript runs faster-whisper's Silero VAD (onnxruntime) on the f32
// file argv[1]: the probabilities of the padded audio, as
// get_speech_timestamps computes them, and the segments for each options
// object of the JSON list argv[2].
const refScript = `
import json, sys
import numpy as np
from faster_whisper.vad import VadOptions, get_speech_timestamps, get_vad_model
x = np.fromfile(sys.argv[1], dtype="<f4")
padded = np.pad(x, (0, 512 - x.shape[0] % 512))
probs = get_vad_model()(padded).reshape(-1)
segs = []
for o in json.loads(sys.argv[2]):
    segs.append(get_speech_timestamps(x, VadOptions(**o)))
print(json.dumps({"probs": [float(p) for p in probs], "segments": segs}))
`

// vadOptions is one set of options in both spellings.
type vadOptions struct {
	name string
	go_  Options
	py   map[string]any
}

var optionCases = []vadOptions{
	{"faster-whisper defaults", DefaultOptions(), map[string]any{}},
	{"silero-vad defaults", Options{Threshold: 0.5, MinSpeechMS: 250, MinSilenceMS: 100, SpeechPadMS: 30},
		map[string]any{"min_speech_duration_ms": 250, "min_silence_duration_ms": 100, "speech_pad_ms": 30}},
	{"max speech 1.5 s", Options{Threshold: 0.5, MinSilenceMS: 300, SpeechPadMS: 100, MaxSpeechSeconds: 1.5},
		map[string]any{"min_silence_duration_ms": 300, "speech_pad_ms": 100, "max_speech_duration_s": 1.5}},
	{"thresholds", Options{Threshold: 0.7, NegThreshold: 0.2, MinSilenceMS: 50, SpeechPadMS: 0},
		map[string]any{"threshold": 0.7, "neg_threshold": 0.2, "min_silence_duration_ms": 50, "speech_pad_ms": 0}},
}

type reference struct {
	Probs    []float64
	Segments [][]struct{ Start, End int }
}

var clip struct {
	once sync.Once
	x    []float32
	ref  reference
}

// speechClip is espeak-ng speech with pauses, and faster-whisper's
// probabilities and segments of it.
func speechClip(t *testing.T) ([]float32, reference) {
	t.Helper()
	clip.once.Do(func() {
		x := silerotest.SpeechWithPauses(t, []string{
			"The birch canoe slid on the smooth planks.",
			"Glue the sheet to the dark blue background.",
			"It is easy to tell the depth of a well.",
		}, []float64{0.7, 2.5, 0.4, 1})
		py := audiotest.Python(t, "faster_whisper", "onnxruntime")
		file := filepath.Join(t.TempDir(), "speech.f32")
		audiotest.WriteF32(t, file, x)
		var opts []map[string]any
		for _, c := range optionCases {
			opts = append(opts, c.py)
		}
		arg, _ := json.Marshal(opts)
		out, err := exec.Command(py, "-c", refScript, file, string(arg)).Output()
		if err != nil {
			t.Fatalf("python: %v", err)
		}
		if err := json.Unmarshal(out, &clip.ref); err != nil {
			t.Fatal(err)
		}
		clip.x = x
	})
	if clip.x == nil {
		t.Fatal("no reference clip (an earlier test failed making it)")
	}
	return clip.x, clip.ref
}

func loadModel(t *testing.T, be backend.Backend) *Model {
	t.Helper()
	m, err := Load(context.Background(), silerotest.Dir(t), be)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// padded is x with faster-whisper's padding to whole chunks.
func padded(x []float32) []float32 {
	p := make([]float32, len(x)+ChunkSamples-len(x)%ChunkSamples)
	copy(p, x)
	return p
}

// probsMatch runs the model on the clip and wants onnxruntime's
// probabilities within 1e-4.
func probsMatch(t *testing.T, be backend.Backend) {
	x, ref := speechClip(t)
	m := loadModel(t, be)
	got, err := m.Probs(context.Background(), padded(x))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ref.Probs) {
		t.Fatalf("%d probabilities, onnxruntime %d", len(got), len(ref.Probs))
	}
	worst, speech := 0.0, 0
	for i, p := range got {
		worst = max(worst, math.Abs(float64(p)-ref.Probs[i]))
		if ref.Probs[i] >= 0.5 {
			speech++
		}
	}
	t.Logf("%s: %d chunks (%d speech), max |p − onnxruntime| %.3g", be.Name(), len(got), speech, worst)
	if worst > 1e-4 || speech < len(got)/4 || speech > 3*len(got)/4 {
		t.Fatalf("max |p − onnxruntime| %.3g over %d chunks, %d of them speech", worst, len(got), speech)
	}
}

// TestProbsMatchOnnxruntime compares the CPU backend's per-chunk speech
// probabilities with faster-whisper's onnxruntime session on real speech.
func TestProbsMatchOnnxruntime(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	probsMatch(t, be)
}

// TestStreamIsProbs cuts the audio into pieces of whole chunks: the
// state carried between them gives the probabilities of the whole.
func TestStreamIsProbs(t *testing.T) {
	x, _ := speechClip(t)
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	m := loadModel(t, be)
	x = padded(x)
	whole, err := m.Probs(context.Background(), x)
	if err != nil {
		t.Fatal(err)
	}
	var st State
	var parts []float32
	for lo := 0; lo < len(x); lo += 37 * ChunkSamples {
		p, err := m.Stream(context.Background(), &st, x[lo:min(len(x), lo+37*ChunkSamples)])
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p...)
	}
	for i := range whole {
		if whole[i] != parts[i] {
			t.Fatalf("chunk %d: %v streamed, %v whole", i, parts[i], whole[i])
		}
	}
}

// TestSegmentsMatchFasterWhisper wants faster-whisper's segments, sample
// for sample, for each set of options: from onnxruntime's probabilities
// (the rules alone) and from this model's (the whole detection).
func TestSegmentsMatchFasterWhisper(t *testing.T) {
	x, ref := speechClip(t)
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	m := loadModel(t, be)
	refProbs := make([]float32, len(ref.Probs))
	for i, p := range ref.Probs {
		refProbs[i] = float32(p)
	}
	for i, c := range optionCases {
		t.Run(c.name, func(t *testing.T) {
			var want []Segment
			for _, s := range ref.Segments[i] {
				want = append(want, Segment{s.Start, s.End})
			}
			if len(want) == 0 {
				t.Fatal("faster-whisper found no speech")
			}
			if got := Speech(refProbs, len(x), c.go_); !equal(got, want) {
				t.Errorf("from onnxruntime's probabilities %v, faster-whisper %v", got, want)
			}
			got, err := m.Detect(context.Background(), x, c.go_)
			if err != nil {
				t.Fatal(err)
			}
			if !equal(got, want) {
				t.Errorf("Detect %v, faster-whisper %v", got, want)
			}
			t.Logf("%d segments: %v", len(got), got)
		})
	}
}

func equal(a, b []Segment) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestValidate checks every limit's edges.
func TestValidate(t *testing.T) {
	d := DefaultOptions()
	for _, c := range []struct {
		set   func(*Options)
		field string // "" : valid
	}{
		{func(o *Options) {}, ""},
		{func(o *Options) { o.Threshold = 0.99 }, ""},
		{func(o *Options) { o.Threshold = 1 }, "threshold"},
		{func(o *Options) { o.Threshold = 0 }, "threshold"},
		{func(o *Options) { o.Threshold = math.NaN() }, "threshold"},
		{func(o *Options) { o.NegThreshold = 0.5 }, ""},
		{func(o *Options) { o.NegThreshold = 0.6 }, "neg_threshold"},
		{func(o *Options) { o.MinSpeechMS = -1 }, "min_speech_duration_ms"},
		{func(o *Options) { o.MinSilenceMS = MaxDurationMS + 1 }, "min_silence_duration_ms"},
		{func(o *Options) { o.SpeechPadMS = MaxSpeechPadMS + 1 }, "speech_pad_ms"},
		{func(o *Options) { o.MaxSpeechSeconds = 0.5 }, "max_speech_duration_s"},
		{func(o *Options) { o.MaxSpeechSeconds = 30 }, ""},
	} {
		o := d
		c.set(&o)
		err := o.Validate()
		var name string
		if oe, ok := err.(*OptionError); ok {
			name = oe.Name
		}
		if name != c.field || (err == nil) != (c.field == "") {
			t.Errorf("%+v: %v, want an error on %q", o, err, c.field)
		}
	}
}

// TestNotSilero refuses directories that are not a Silero model.
func TestNotSilero(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	if IsModelDir(t.TempDir()) {
		t.Error("an empty directory is a model")
	}
	if _, err := Load(context.Background(), t.TempDir(), be); err == nil || !strings.Contains(err.Error(), "silero") {
		t.Errorf("Load of an empty directory: %v", err)
	}
	if !IsModelDir(silerotest.Dir(t)) {
		t.Error("the fixture is not a model directory")
	}
}

// TestRefusesOtherGraphs loads a real ONNX file that is not Silero's
// (the Piper voice) under a Silero name: ErrNotSilero, not a panic.
func TestRefusesOtherGraphs(t *testing.T) {
	voice, _ := filepath.Glob(filepath.Join(testenv.PiperVoiceDir(t, "piper-joe-medium"), "*.onnx"))
	if len(voice) != 1 {
		t.Fatalf("voice files %v", voice)
	}
	dir := t.TempDir()
	if err := os.Symlink(voice[0], filepath.Join(dir, "silero_vad.onnx")); err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	if _, err := Load(context.Background(), dir, be); !errors.Is(err, ErrNotSilero) {
		t.Fatalf("Load: %v, want ErrNotSilero", err)
	}
}

// TestShortAudio runs audio shorter than a chunk, and none.
func TestShortAudio(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	m := loadModel(t, be)
	for _, n := range []int{0, 1, 100, ChunkSamples} {
		segs, err := m.Detect(context.Background(), make([]float32, n), DefaultOptions())
		if err != nil || len(segs) != 0 {
			t.Errorf("%d samples of silence: %v, %v", n, segs, err)
		}
	}
}

// BenchmarkProbs measures the CPU backend on the speech clip: the
// real-time factor is the clip's seconds over the time per op.
func BenchmarkProbs(b *testing.B) {
	x := silerotest.SpeechWithPauses(b, []string{"The birch canoe slid on the smooth planks."}, []float64{1, 1})
	be := cpu.New(cpu.Options{})
	defer be.Close()
	m, err := Load(context.Background(), silerotest.Dir(b), be)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	b.ResetTimer()
	for range b.N {
		if _, err := m.Probs(context.Background(), x); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(x))/SampleRate*float64(b.N)/b.Elapsed().Seconds(), "audio-s/s")
}
