package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"fusion/engine/audio"
	"fusion/engine/audio/audiotest"
	"fusion/node/nodetest"
)

// TestAudioProcess posts espeak-ng speech to /v1/audio/process: each task
// answers WAV audio as asked (normalize to the target loudness, resample
// to the rate, trim shorter), and bad requests are 400s in OpenAI's
// error shape naming the field.
func TestAudioProcess(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: testKey, ModelsDir: t.TempDir()})
	speech := speechWAV(t, "It has been raining for three days.")
	padded := make([]float32, 16000)
	sig, err := audio.DecodeBytes(context.Background(), speech, audio.Options{})
	if err != nil {
		t.Fatal(err)
	}
	padded = append(append(padded, sig.Samples...), make([]float32, 16000)...)
	withSilence := wav16(padded)
	post := func(fields map[string]string, file []byte) (int, http.Header, []byte) {
		ct, body := multipartBody(t, fields, file)
		req, _ := http.NewRequest(http.MethodPost, n.URL()+"/v1/audio/process", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testKey)
		req.Header.Set("Content-Type", ct)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, out
	}
	decode := func(t *testing.T, b []byte) audio.Signal {
		s, err := audio.DecodeBytes(context.Background(), b, audio.Options{})
		if err != nil {
			t.Fatalf("the answer is not WAV: %v", err)
		}
		return s
	}
	t.Run("normalize", func(t *testing.T) {
		code, h, body := post(map[string]string{"model": "signal", "task": "normalize", "target_lufs": "-16"}, speech)
		if code != http.StatusOK || h.Get("Content-Type") != "audio/wav" {
			t.Fatalf("%d %s %.200s", code, h.Get("Content-Type"), body)
		}
		out, _ := strconv.ParseFloat(h.Get("X-Output-LUFS"), 64)
		if math.Abs(out+16) > 0.01 {
			t.Errorf("X-Output-LUFS %q, want -16.00", h.Get("X-Output-LUFS"))
		}
		if s := decode(t, body); s.Frames() != sig.Frames() {
			t.Errorf("%d frames, sent %d", s.Frames(), sig.Frames())
		}
	})
	t.Run("normalize to 0 LUFS", func(t *testing.T) {
		// An explicit 0 is the target, not the default −23.
		code, h, body := post(map[string]string{"model": "signal", "task": "normalize", "target_lufs": "0"}, speech)
		if code != http.StatusOK || h.Get("X-Output-LUFS") == "" {
			t.Fatalf("%d %.200s", code, body)
		}
		if out, _ := strconv.ParseFloat(h.Get("X-Output-LUFS"), 64); math.Abs(out) > 0.01 {
			t.Errorf("X-Output-LUFS %q, want 0.00", h.Get("X-Output-LUFS"))
		}
	})
	t.Run("resample", func(t *testing.T) {
		code, _, body := post(map[string]string{"model": "signal", "task": "resample", "sample_rate": "8000"}, speech)
		if s := decode(t, body); code != http.StatusOK || s.Rate != 8000 || s.Frames() != (sig.Frames()+1)/2 {
			t.Errorf("%d: %d Hz, %d frames", code, s.Rate, s.Frames())
		}
	})
	t.Run("trim", func(t *testing.T) {
		code, _, body := post(map[string]string{"model": "signal", "task": "trim"}, withSilence)
		s := decode(t, body)
		if code != http.StatusOK || s.Frames() > sig.Frames() || s.Frames() < sig.Frames()/2 {
			t.Errorf("%d: %d frames from %d (speech alone %d)", code, s.Frames(), len(padded), sig.Frames())
		}
	})
	for _, c := range []struct {
		name   string
		fields map[string]string
		file   []byte
		param  string
		msg    string
	}{
		{"unknown task", map[string]string{"model": "signal", "task": "diarize"}, speech, "task", "supported: resample, normalize, trim"},
		{"no task", map[string]string{"model": "signal"}, speech, "task", "Missing required parameter"},
		{"no model", map[string]string{"task": "trim"}, speech, "model", "Missing required parameter"},
		{"no file", map[string]string{"model": "signal", "task": "trim"}, nil, "file", "Missing required parameter"},
		{"not audio", map[string]string{"model": "signal", "task": "trim"}, []byte("plain text, not a sound at all"), "file", "not a recognized audio format"},
		{"rate", map[string]string{"model": "signal", "task": "resample", "sample_rate": "100"}, speech, "sample_rate", "8000 to 192000"},
		{"rate not a number", map[string]string{"model": "signal", "task": "resample", "sample_rate": "fast"}, speech, "sample_rate", "expected an integer"},
		{"rate 0", map[string]string{"model": "signal", "task": "resample", "sample_rate": "0"}, speech, "sample_rate", "8000 to 192000"},
		{"rate not an integer", map[string]string{"model": "signal", "task": "resample", "sample_rate": "16000.5"}, speech, "sample_rate", "expected an integer"},
		{"target", map[string]string{"model": "signal", "task": "normalize", "target_lufs": "3"}, speech, "target_lufs", "-70 to 0"},
		{"threshold 0", map[string]string{"model": "signal", "task": "trim", "threshold_db": "0"}, speech, "threshold_db", "below 0"},
		{"silent", map[string]string{"model": "signal", "task": "normalize"}, wav16(make([]float32, 16000)), "file", "silent"},
		{"unknown field", map[string]string{"model": "signal", "task": "trim", "colour": "blue"}, speech, "colour", "Unrecognized"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, body := post(c.fields, c.file)
			var e struct {
				Error struct{ Message, Type, Param string }
			}
			if err := json.Unmarshal(body, &e); err != nil || code != http.StatusBadRequest {
				t.Fatalf("%d %s", code, body)
			}
			if e.Error.Type != "invalid_request_error" || e.Error.Param != c.param || !strings.Contains(e.Error.Message, c.msg) {
				t.Fatalf("error %+v, want param %q and a message with %q", e.Error, c.param, c.msg)
			}
		})
	}
}

// TestMultilingualEndpoints serves the random-weight tiny multilingual
// Whisper (audiotest.WhisperTinyMultilingual) from the pool: a language
// the model does not have is a 400 naming it. (Decoding on the random
// model runs every fallback temperature to the 224-token cap, minutes
// under -race on a loaded machine: detection, transcription and
// translation are shown against faster-whisper in engine/whisper.)
func TestMultilingualEndpoints(t *testing.T) {
	models := nodetest.Models(t)
	if err := os.Symlink(audiotest.WhisperTinyMultilingual(t), filepath.Join(models, "whisper-multi")); err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, nodetest.Options{APIKey: testKey, ModelsDir: models})
	speech := speechWAV(t, "Good morning.")
	for _, c := range []struct {
		path   string
		fields map[string]string
		code   int
		want   string
	}{
		{"/v1/audio/transcriptions", map[string]string{"model": "whisper-multi", "language": "xx"}, http.StatusBadRequest, "not one of the model's 99"},
	} {
		ct, body := multipartBody(t, c.fields, speech)
		code, out := postAudio(t, n, c.path, ct, body)
		if code != c.code || !strings.Contains(string(out), c.want) {
			t.Errorf("%s %v: %d %.300s; want %d with %s", c.path, c.fields, code, out, c.code, c.want)
		}
	}
}
