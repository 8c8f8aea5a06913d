package openai_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"fusion/engine/audio"
	"fusion/engine/backend/cpu"
	"fusion/engine/silero"
	"fusion/engine/silero/silerotest"
	"fusion/node"
	"fusion/node/nodetest"
	"fusion/router/openai"
)

// vadModel is the Silero VAD's name (its directory) in the tests' models
// dir.
const vadModel = "silero-vad"

// TestAudioVAD posts espeak-ng speech with pauses to /v1/audio/process
// with task vad, on the node that has the Silero VAD and through a
// cluster member that forwards it: the segments are the engine's (which
// engine/silero shows equal to faster-whisper's), with faster-whisper's
// defaults and with options; options out of range, a model that is not a
// VAD and an unknown task are 400s naming the field.
func TestAudioVAD(t *testing.T) {
	fixture := silerotest.Dir(t)
	models := nodetest.Models(t)
	if err := os.Symlink(fixture, filepath.Join(models, vadModel)); err != nil {
		t.Fatal(err)
	}
	wav := wav16(silerotest.SpeechWithPauses(t, []string{"The birch canoe slid on the smooth planks.", "Glue the sheet to the dark blue background."},
		[]float64{0.5, 0.6, 2.2}))

	// The expected answers: the model on the CPU backend over the samples
	// the node decodes.
	sig, err := audio.DecodeBytes(context.Background(), wav, audio.Options{})
	if err != nil {
		t.Fatal(err)
	}
	x, err := audio.Mono16k(context.Background(), sig)
	if err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	m, err := silero.Load(context.Background(), fixture, be)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	expect := func(o silero.Options) openai.VADResponse {
		segs, err := m.Detect(context.Background(), x, o)
		if err != nil {
			t.Fatal(err)
		}
		r := openai.VADResponse{Task: "vad", Duration: float64(len(x)) / 16000, Segments: []openai.VADSegment{}}
		for _, s := range segs {
			r.Segments = append(r.Segments, openai.VADSegment{Start: float64(s.Start) / 16000, End: float64(s.End) / 16000})
		}
		return r
	}
	defaults := expect(silero.DefaultOptions())
	tight := expect(silero.Options{Threshold: 0.5, MinSpeechMS: 250, MinSilenceMS: 100, SpeechPadMS: 30})
	if len(defaults.Segments) != 1 || len(tight.Segments) != 2 {
		t.Fatalf("segments %v with the defaults, %v with 100 ms of silence: want 1 and 2", defaults.Segments, tight.Segments)
	}
	tightFields := map[string]string{"min_speech_duration_ms": "250", "min_silence_duration_ms": "100", "speech_pad_ms": "30"}

	nodes := nodetest.StartCluster(t,
		nodetest.Options{APIKey: testKey, ModelsDir: models},
		nodetest.Options{APIKey: testKey, ModelsDir: t.TempDir()})
	a, b := nodes[0], nodes[1]

	post := func(n *node.Node, fields map[string]string) (int, []byte) {
		f := map[string]string{"model": vadModel, "task": "vad"}
		for k, v := range fields {
			if v == "" {
				delete(f, k)
			} else {
				f[k] = v
			}
		}
		ct, body := multipartBody(t, f, wav)
		return postAudio(t, n, "/v1/audio/process", ct, body)
	}
	check := func(t *testing.T, code int, out []byte, want openai.VADResponse) {
		t.Helper()
		var got openai.VADResponse
		if err := json.Unmarshal(out, &got); err != nil || code != http.StatusOK {
			t.Fatalf("%d %.300s", code, out)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("answer %+v, want %+v", got, want)
		}
	}
	t.Run("defaults", func(t *testing.T) {
		code, out := post(a, nil)
		check(t, code, out, defaults)
	})
	t.Run("options", func(t *testing.T) {
		code, out := post(a, tightFields)
		check(t, code, out, tight)
	})
	t.Run("forwarded", func(t *testing.T) {
		// b forwards once it has heard of the model.
		deadline := time.Now().Add(60 * time.Second)
		for {
			code, out := post(b, tightFields)
			if code == http.StatusOK {
				check(t, code, out, tight)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("b never forwarded the request to a: %d %s", code, out)
			}
			time.Sleep(200 * time.Millisecond)
		}
		// The peer's refusal comes back as the local one would.
		code, out := post(b, map[string]string{"model": nodetest.Model})
		if code != http.StatusBadRequest || !strings.Contains(string(out), "does not detect speech") || !strings.Contains(string(out), `"param":"model"`) {
			t.Fatalf("a chat model through b: %d %s", code, out)
		}
	})
	for _, c := range []struct {
		name   string
		fields map[string]string
		code   int
		param  string
		msg    string
	}{
		{"threshold", map[string]string{"threshold": "1.5"}, 400, "threshold", "between 0.01 and 0.99"},
		{"threshold not a number", map[string]string{"threshold": "high"}, 400, "threshold", "expected a number"},
		{"neg_threshold over threshold", map[string]string{"neg_threshold": "0.6"}, 400, "neg_threshold", "between 0.01 and threshold"},
		{"pad not whole", map[string]string{"speech_pad_ms": "1.5"}, 400, "speech_pad_ms", "whole number"},
		{"pad", map[string]string{"speech_pad_ms": "10001"}, 400, "speech_pad_ms", "between 0 and 10000"},
		{"silence", map[string]string{"min_silence_duration_ms": "-1"}, 400, "min_silence_duration_ms", "between 0 and 60000"},
		{"max speech", map[string]string{"max_speech_duration_s": "0.5"}, 400, "max_speech_duration_s", "between 1 and 86400"},
		{"chat model", map[string]string{"model": nodetest.Model}, 400, "model", "does not detect speech"},
		{"unknown model", map[string]string{"model": "no-such-vad"}, 404, "model", "no-such-vad"},
		{"unknown task", map[string]string{"task": "diarize"}, 400, "task", "supported: resample, normalize, trim, vad, denoise"},
		{"no model", map[string]string{"model": ""}, 400, "model", "Missing required parameter"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out := post(a, c.fields)
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
