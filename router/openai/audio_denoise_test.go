package openai_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fusion/engine/audio"
	"fusion/engine/audio/process"
	"fusion/engine/backend/cpu"
	"fusion/engine/rnnoise"
	"fusion/engine/rnnoise/rnnoisetest"
	"fusion/node"
	"fusion/node/nodetest"
)

// denoiseModel is RNNoise's name (its directory) in the tests' models
// dir.
const denoiseModel = "rnnoise"

// TestAudioDenoise posts noisy espeak-ng speech to /v1/audio/process with
// task denoise, on the node that has the RNNoise model and through a
// cluster member that forwards it: the answer is a mono 16-bit WAV at the
// upload's rate whose samples are the engine's (which engine/rnnoise shows
// equal to RNNoise's own runtime), at 48 kHz and at 16 kHz (resampled
// both ways); a model that is not a denoiser, an unknown model and a file
// that is not audio are 4xx naming the field.
func TestAudioDenoise(t *testing.T) {
	fixture := rnnoisetest.Dir(t)
	models := nodetest.Models(t)
	if err := os.Symlink(fixture, filepath.Join(models, denoiseModel)); err != nil {
		t.Fatal(err)
	}
	x := rnnoisetest.NoisySpeech(t, "Glue the sheet.", 3)
	upload48, err := process.WAV(audio.Signal{Rate: rnnoise.SampleRate, Channels: 1, Samples: x})
	if err != nil {
		t.Fatal(err)
	}

	// The expected samples: the model on the CPU backend over what the
	// node decodes.
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	m, err := rnnoise.Load(be, fixture)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	sig, err := audio.DecodeBytes(context.Background(), upload48, audio.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want48, _, err := m.Denoise(context.Background(), sig.Samples)
	if err != nil {
		t.Fatal(err)
	}
	// The same clip at 16 kHz: the answer is at 16 kHz, as long.
	var x16 []float32
	for i := 0; i < len(x); i += 3 {
		x16 = append(x16, x[i])
	}
	upload16 := wav16(x16)

	nodes := nodetest.StartCluster(t,
		nodetest.Options{APIKey: testKey, ModelsDir: models},
		nodetest.Options{APIKey: testKey, ModelsDir: t.TempDir()})
	a, b := nodes[0], nodes[1]

	post := func(n *node.Node, fields map[string]string, file []byte) (int, []byte) {
		f := map[string]string{"model": denoiseModel, "task": "denoise"}
		for k, v := range fields {
			f[k] = v
		}
		ct, body := multipartBody(t, f, file)
		return postAudio(t, n, "/v1/audio/process", ct, body)
	}
	// decode reads an answer: mono 16-bit PCM at rate.
	decode := func(t *testing.T, code int, out []byte, rate int) []float32 {
		t.Helper()
		if code != http.StatusOK {
			t.Fatalf("%d %.300s", code, out)
		}
		s, err := audio.DecodeBytes(context.Background(), out, audio.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Rate != rate || s.Channels != 1 {
			t.Fatalf("answer at %d Hz with %d channels, want %d Hz mono", s.Rate, s.Channels, rate)
		}
		return s.Samples
	}
	// same checks the answer against the engine's samples: 16-bit
	// quantization, and the MLX backend's float32 differences when the
	// node's models run there.
	same := func(t *testing.T, got, want []float32) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%d samples, want %d", len(got), len(want))
		}
		var d float64
		for i := range got {
			d = max(d, math.Abs(float64(got[i])-float64(want[i])))
		}
		if d > 2e-4 {
			t.Fatalf("samples differ from the engine's by up to %.3g", d)
		}
	}
	t.Run("48 kHz", func(t *testing.T) {
		code, out := post(a, nil, upload48)
		same(t, decode(t, code, out, 48000), want48)
	})
	t.Run("16 kHz", func(t *testing.T) {
		code, out := post(a, nil, upload16)
		y := decode(t, code, out, 16000)
		if len(y) != len(x16) {
			t.Fatalf("%d samples for %d", len(y), len(x16))
		}
		// The noise before the speech (0.25–1 s) is mostly gone.
		in, got := rmsOf(x16[4000:16000]), rmsOf(y[4000:16000])
		if got > in/10 {
			t.Fatalf("noise RMS %.4f in, %.4f out", in, got)
		}
	})
	t.Run("forwarded", func(t *testing.T) {
		// b forwards once it has heard of the model.
		deadline := time.Now().Add(60 * time.Second)
		for {
			code, out := post(b, nil, upload48)
			if code == http.StatusOK {
				same(t, decode(t, code, out, 48000), want48)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("b never forwarded the request to a: %d %s", code, out)
			}
			time.Sleep(200 * time.Millisecond)
		}
		// The peer's refusal comes back as the local one would.
		code, out := post(b, map[string]string{"model": nodetest.Model}, upload48)
		if code != http.StatusBadRequest || !strings.Contains(string(out), "does not denoise") || !strings.Contains(string(out), `"param":"model"`) {
			t.Fatalf("a chat model through b: %d %s", code, out)
		}
	})
	for _, c := range []struct {
		name   string
		fields map[string]string
		file   []byte
		code   int
		param  string
		msg    string
	}{
		{"chat model", map[string]string{"model": nodetest.Model}, upload48, 400, "model", "does not denoise"},
		{"unknown model", map[string]string{"model": "no-such-denoiser"}, upload48, 404, "model", "no-such-denoiser"},
		{"not audio", nil, []byte("this is not audio at all, just some text"), 400, "file", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out := post(a, c.fields, c.file)
			var e struct {
				Error struct{ Message, Type, Param string }
			}
			if err := json.Unmarshal(out, &e); err != nil || code != c.code {
				t.Fatalf("%d %s, want %d", code, out, c.code)
			}
			if e.Error.Param != c.param || !strings.Contains(e.Error.Message, c.msg) {
				t.Fatalf("error %+v, want param %q and a message with %q", e.Error, c.param, c.msg)
			}
		})
	}
}

func rmsOf(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s / float64(len(x)))
}
