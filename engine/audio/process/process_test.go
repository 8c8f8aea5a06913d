package process

import (
	"context"
	"errors"
	"math"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"fusion/engine/audio"
	"fusion/engine/audio/audiotest"
)

// tone is a stereo signal: a 440 Hz tone on the left, 3 kHz on the right
// at half the amplitude, between silent stretches of lead and tail
// seconds.
func tone(rate int, lead, body, tail float64) audio.Signal {
	n0, n1, n2 := int(lead*float64(rate)), int(body*float64(rate)), int(tail*float64(rate))
	s := audio.Signal{Rate: rate, Channels: 2, Samples: make([]float32, 2*(n0+n1+n2))}
	for i := range n1 {
		t := float64(i) / float64(rate)
		s.Samples[2*(n0+i)] = float32(0.5 * math.Sin(2*math.Pi*440*t))
		s.Samples[2*(n0+i)+1] = float32(0.25 * math.Sin(2*math.Pi*3000*t))
	}
	return s
}

// TestLoudnessMatchesPyloudnorm measures the integrated loudness of
// espeak-ng speech (22.05 kHz mono) and of a stereo tone with silent
// stretches (44.1 kHz, where the gates matter) and wants pyloudnorm's
// value (float64 input) within 1e-6 LU, and checks that normalize lands
// on its target.
func TestLoudnessMatchesPyloudnorm(t *testing.T) {
	speech, err := audio.DecodeBytes(context.Background(), audiotest.EspeakWAV(t, "It has been raining for three days, and the rivers are very high."), audio.Options{})
	if err != nil {
		t.Fatal(err)
	}
	signals := []audio.Signal{speech, tone(44100, 1, 2.5, 0.7)}
	dir := t.TempDir()
	args := []string{}
	for i, s := range signals {
		f := filepath.Join(dir, strconv.Itoa(i)+".f32")
		audiotest.WriteF32(t, f, s.Samples)
		args = append(args, f, strconv.Itoa(s.Rate), strconv.Itoa(s.Channels))
	}
	py := audiotest.Python(t, "pyloudnorm")
	out, err := exec.Command(py, append([]string{"-c", `
import sys, numpy as np, pyloudnorm
for i in range(1, len(sys.argv), 3):
    x = np.fromfile(sys.argv[i], dtype="<f4").astype(np.float64).reshape(-1, int(sys.argv[i+2]))
    print(repr(float(pyloudnorm.Meter(int(sys.argv[i+1])).integrated_loudness(x))))
`}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("pyloudnorm: %v\n%s", err, out)
	}
	lines := strings.Fields(string(out))
	for i, s := range signals {
		want, _ := strconv.ParseFloat(lines[i], 64)
		got, err := Loudness(s)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("signal %d (%d Hz, %d ch): %.6f LUFS, pyloudnorm %.6f", i, s.Rate, s.Channels, got, want)
		if math.Abs(got-want) > 1e-6 {
			t.Errorf("signal %d: %v LUFS, pyloudnorm %v", i, got, want)
		}
		res, err := Run(context.Background(), "normalize", s, Params{TargetLUFS: ptr(-16.0)})
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(res.OutputLUFS+16) > 1e-3 || math.Abs(res.InputLUFS-want) > 1e-6 {
			t.Errorf("normalize: %v → %v LUFS, want −16", res.InputLUFS, res.OutputLUFS)
		}
	}
}

// TestTasks runs resample and trim, and the tasks' errors.
func TestTasks(t *testing.T) {
	ctx := context.Background()
	s := tone(44100, 0.5, 1, 0.25)
	res, err := Run(ctx, "resample", s, Params{SampleRate: ptr(22050)})
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Signal; r.Rate != 22050 || r.Channels != 2 || r.Frames() != (s.Frames()+1)/2 {
		t.Errorf("resampled to %d Hz, %d channels, %d frames; want 22050, 2, ⌈%d/2⌉", r.Rate, r.Channels, r.Frames(), s.Frames())
	}
	res, err = Run(ctx, "trim", s, Params{})
	if err != nil {
		t.Fatal(err)
	}
	// The tone starts and ends on 10-ms frame boundaries: exactly it
	// is kept.
	if got := res.Signal.Frames(); got != 44100 {
		t.Errorf("trimmed to %d frames, want the tone's 44100", got)
	}
	if got := Trim(audio.Signal{Rate: 16000, Channels: 1, Samples: make([]float32, 16000)}, -50); got.Frames() != 0 {
		t.Errorf("silence trimmed to %d frames, want 0", got.Frames())
	}
	// The WAV reads back as the same signal within 16-bit precision.
	wav, err := WAV(res.Signal)
	if err != nil {
		t.Fatal(err)
	}
	back, err := audio.DecodeBytes(ctx, wav, audio.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if back.Rate != 44100 || back.Channels != 2 || len(back.Samples) != len(res.Signal.Samples) {
		t.Fatalf("WAV read back as %d Hz, %d channels, %d samples", back.Rate, back.Channels, len(back.Samples))
	}
	for i, v := range back.Samples {
		if math.Abs(float64(v-res.Signal.Samples[i])) > 1.0/32767 {
			t.Fatalf("sample %d: %v, wrote %v", i, v, res.Signal.Samples[i])
		}
	}
	for _, c := range []struct {
		task string
		s    audio.Signal
		p    Params
		want error
		msg  string
	}{
		{"denoise", s, Params{}, ErrTask, "denoise"},
		{"resample", s, Params{SampleRate: ptr(100)}, ErrParams, "sample_rate"},
		{"resample", s, Params{SampleRate: ptr(0)}, ErrParams, "sample_rate 0"},
		{"normalize", s, Params{TargetLUFS: ptr(5.0)}, ErrParams, "target_lufs"},
		{"normalize", s, Params{TargetLUFS: ptr(math.NaN())}, ErrParams, "target_lufs"},
		{"normalize", audio.Signal{Rate: 16000, Channels: 1, Samples: make([]float32, 16000)}, Params{}, ErrParams, "silent"},
		{"normalize", audio.Signal{Rate: 16000, Channels: 1, Samples: make([]float32, 100)}, Params{}, ErrParams, "0.4 s"},
		{"trim", s, Params{ThresholdDB: ptr(3.0)}, ErrParams, "threshold_db"},
		{"trim", s, Params{ThresholdDB: ptr(0.0)}, ErrParams, "threshold_db 0"},
	} {
		if _, err := Run(ctx, c.task, c.s, c.p); !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s %+v: %v, want %v naming %q", c.task, c.p, err, c.want, c.msg)
		}
	}
	// A parameter's error names it (the endpoint's param); an explicit 0
	// is a value, not the default: 0 LUFS is a legal target.
	var pe *ParamError
	if _, err := Run(ctx, "resample", s, Params{SampleRate: ptr(0)}); !errors.As(err, &pe) || pe.Param != "sample_rate" {
		t.Errorf("sample rate 0: %v, want a ParamError naming sample_rate", err)
	}
	if res, err := Run(ctx, "normalize", s, Params{TargetLUFS: ptr(0.0)}); err != nil || math.Abs(res.OutputLUFS) > 1e-3 {
		t.Errorf("normalize to 0 LUFS: %v, %+v", err, res)
	}
}

func ptr[T any](v T) *T { return &v }
