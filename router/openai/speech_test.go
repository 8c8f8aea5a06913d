package openai_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"fusion/engine/backend/cpu"
	"fusion/engine/piper"
	"fusion/internal/testenv"
	"fusion/node"
	"fusion/node/nodetest"
)

// ttsModel is the voice's name (its directory) in the speech tests'
// models dir.
const ttsModel = "piper-joe-medium"

// ttsModels is a models dir with the demo chat model and the Piper voice
// fixture linked in; it returns the dir and the voice's files.
func ttsModels(t *testing.T) (models, fixture string) {
	t.Helper()
	fixture = testenv.PiperVoiceDir(t, ttsModel)
	if _, err := exec.LookPath("espeak-ng"); err != nil {
		missing(t, "espeak-ng is not installed: %v", err)
	}
	models = nodetest.Models(t)
	if err := os.Symlink(fixture, filepath.Join(models, ttsModel)); err != nil {
		t.Fatal(err)
	}
	return models, fixture
}

// postSpeech posts a JSON body to /v1/audio/speech.
func postSpeech(t *testing.T, n *node.Node, body string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, n.URL()+"/v1/audio/speech", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, out
}

// directSamples is, per speed, the number of samples a direct
// piper.Speak of text makes with the voice's scales divided by the speed
// and the seed the engine uses (0).
func directSamples(t *testing.T, dir, text string, speeds ...float32) []int {
	t.Helper()
	v, err := piper.Load(context.Background(), dir, cpu.New(cpu.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	inf := v.Config.Inference
	out := make([]int, len(speeds))
	for i, speed := range speeds {
		sc := piper.Scales{Noise: inf.NoiseScale, Length: inf.LengthScale / speed, NoiseW: inf.NoiseW}
		err = v.Speak(context.Background(), piper.Espeak{}, text, sc, piper.Normal(0), func(s piper.Sentence) error {
			out[i] += len(s.Samples)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// speechMaxInput is the input cap of the speech test's voice node.
const speechMaxInput = 40

// speechBadInput sends what a client should not to n (a node holding the
// voice, input capped at speechMaxInput): each is a 4xx in OpenAI's
// error shape naming the problem, never a 500.
func speechBadInput(t *testing.T, n *node.Node) {
	const maxInput = speechMaxInput
	body := func(fields string) string {
		return `{"model":"` + ttsModel + `","input":"Hi.","voice":"default","response_format":"wav"` + fields + `}`
	}
	cases := []struct {
		name, body string
		status     int
		param, msg string
	}{
		{"no model", `{"input":"Hi.","voice":"default"}`, 400, "model", "Missing required parameter: 'model'"},
		{"no input", `{"model":"` + ttsModel + `","voice":"default"}`, 400, "input", "Missing required parameter: 'input'"},
		{"no voice", `{"model":"` + ttsModel + `","input":"Hi."}`, 400, "voice", "Missing required parameter: 'voice'"},
		{"input type", `{"model":"` + ttsModel + `","input":3,"voice":"default"}`, 400, "input", "expected"},
		{"too long", body(`,"input":"` + strings.Repeat("é", maxInput+1) + `"`), 400, "input", "maximum length 40"},
		{"blank", body(`,"input":"   "`), 400, "", "input must not be empty"},
		{"slow", body(`,"speed":0.1`), 400, "speed", "between 0.25 and 4"},
		{"fast", body(`,"speed":4.5`), 400, "speed", "between 0.25 and 4"},
		{"unknown format", body(`,"response_format":"ogg"`), 400, "response_format", "is not one of"},
		{"unknown voice", body(`,"voice":"alloy"`), 400, "", `voice "alloy" is not one of model "piper-joe-medium"'s voices: default`},
		{"chat model", body(`,"model":"` + nodetest.Model + `"`), 400, "", "does not speak"},
		{"unknown model", body(`,"model":"nope"`), 404, "model", "nope"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, out := postSpeech(t, n, c.body)
			var e struct {
				Error struct{ Message, Type, Param, Code string }
			}
			if err := json.Unmarshal(out, &e); err != nil || resp.StatusCode != c.status {
				t.Fatalf("%d %s", resp.StatusCode, out)
			}
			if e.Error.Param != c.param || !strings.Contains(e.Error.Message, c.msg) {
				t.Fatalf("error %+v, want param %q and a message with %q", e.Error, c.param, c.msg)
			}
			if strings.HasPrefix(c.name, "no ") && e.Error.Code != "missing_required_parameter" {
				t.Errorf("code %q, want missing_required_parameter", e.Error.Code)
			}
		})
	}
	// mp3 needs ffmpeg: without it on PATH, a 400 that names it (wav,
	// pcm and flac are written in Go).
	t.Run("mp3 without ffmpeg", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		resp, out := postSpeech(t, n, body(`,"response_format":"mp3"`))
		var e struct {
			Error struct{ Message, Param, Code string }
		}
		if err := json.Unmarshal(out, &e); err != nil || resp.StatusCode != http.StatusBadRequest ||
			e.Error.Param != "response_format" || e.Error.Code != "unsupported_value" || !strings.Contains(e.Error.Message, "needs ffmpeg") {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
	})
}

// ffmpegPCM is ffmpeg's decode of an encoded answer as 16-bit mono PCM
// at rate.
func ffmpegPCM(t *testing.T, data []byte, rate int) []byte {
	t.Helper()
	ff, err := exec.LookPath("ffmpeg")
	if err != nil {
		missing(t, "ffmpeg is not installed (scripts/test-deps.sh installs it): %v", err)
	}
	cmd := exec.Command(ff, "-nostdin", "-hide_banner", "-loglevel", "error", "-i", "pipe:0", "-f", "s16le", "-ac", "1", "-ar", strconv.Itoa(rate), "pipe:1")
	cmd.Stdin = bytes.NewReader(data)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ffmpeg: %v\n%s", err, stderr.String())
	}
	return out
}

// TestPythonSDKSpeech runs the official openai client's
// audio.speech.create (plain and with_streaming_response) against the
// node holding the voice and through a forwarding member of a 3-node
// cluster; the sample counts equal a direct piper.Speak's. The WAV and
// PCM answers, the voices list and the bad requests are checked on the
// same cluster (loading the voice is slow under -race).
func TestPythonSDKSpeech(t *testing.T) {
	py := testenv.Python(t)
	if out, err := exec.Command(py, "-c", "import openai, pytest").CombinedOutput(); err != nil {
		missing(t, "openai or pytest is not installed in %s: %s", py, out)
	}
	models, fixture := ttsModels(t)
	const text = "Hi. Go!"
	counts := directSamples(t, fixture, text, 1, 2)
	want, wantFast := counts[0], counts[1]

	nodes := nodetest.StartCluster(t,
		nodetest.Options{APIKey: testKey, ModelsDir: models, MaxSpeechInput: speechMaxInput},
		nodetest.Options{APIKey: testKey, ModelsDir: t.TempDir()},
		nodetest.Options{APIKey: testKey, ModelsDir: t.TempDir()})
	n, fwd := nodes[0], nodes[2]

	// The WAV on a (the format when none is asked): a streaming header,
	// then the samples of the text.
	req := `{"model":"` + ttsModel + `","input":"` + text + `","voice":"default"}`
	resp, out := postSpeech(t, n, req)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "audio/wav" || resp.Header.Get("X-Sample-Rate") != "22050" {
		t.Fatalf("%d %v %.200s", resp.StatusCode, resp.Header, out)
	}
	if len(resp.TransferEncoding) == 0 || resp.TransferEncoding[0] != "chunked" {
		t.Errorf("transfer encoding %v, want chunked", resp.TransferEncoding)
	}
	if len(out) < 44 || string(out[:4]) != "RIFF" || binary.LittleEndian.Uint32(out[40:44]) != 0xFFFFFFFF ||
		binary.LittleEndian.Uint32(out[24:28]) != 22050 || (len(out)-44)/2 != want {
		t.Fatalf("wav: %d bytes, header % x; want 44 + 2·%d", len(out), out[:min(44, len(out))], want)
	}
	// Every other format of OpenAI's: flac is the same samples losslessly;
	// mp3, opus and aac (ffmpeg's) decode to about the same length.
	for _, f := range []struct {
		format, contentType string
		slack               int // samples the codec may add or drop
	}{{"flac", "audio/flac", 0}, {"mp3", "audio/mpeg", 2500}, {"opus", "audio/ogg", 2500}, {"aac", "audio/aac", 2500}} {
		resp, enc := postSpeech(t, n, strings.Replace(req, `}`, `,"response_format":"`+f.format+`"}`, 1))
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != f.contentType {
			t.Fatalf("%s: %d %v %.200s", f.format, resp.StatusCode, resp.Header, enc)
		}
		pcm := ffmpegPCM(t, enc, 22050)
		if f.slack == 0 && !bytes.Equal(pcm, out[44:]) {
			t.Errorf("%s: %d bytes of PCM decoded, not the wav's %d samples", f.format, len(pcm), want)
		}
		if d := len(pcm)/2 - want; d < -f.slack || d > f.slack {
			t.Errorf("%s: %d samples decoded, want %d ± %d", f.format, len(pcm)/2, want, f.slack)
		}
		t.Logf("%s: %d bytes, %d samples decoded (wav %d)", f.format, len(enc), len(pcm)/2, want)
	}
	// c forwards once it has heard of the voice.
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, out := postSpeech(t, fwd, strings.Replace(req, `}`, `,"response_format":"pcm"}`, 1))
		if resp.StatusCode == http.StatusOK {
			if len(out) != 2*want || resp.Header.Get("Content-Type") != "audio/pcm" {
				t.Fatalf("pcm through c: %d bytes (%s), want %d", len(out), resp.Header.Get("Content-Type"), 2*want)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("c never forwarded the speech to a: %d %s", resp.StatusCode, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The voices, listed on a forwarding member too.
	for _, m := range []*node.Node{n, fwd} {
		r, _ := http.NewRequest(http.MethodGet, m.URL()+"/v1/audio/voices", nil)
		r.Header.Set("Authorization", "Bearer "+testKey)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var list struct {
			Object string
			Data   []struct{ ID, Object, Model string }
		}
		if err := json.Unmarshal(b, &list); err != nil || list.Object != "list" || len(list.Data) != 1 ||
			list.Data[0].ID != "default" || list.Data[0].Model != ttsModel || list.Data[0].Object != "voice" {
			t.Fatalf("voices: %d %s", resp.StatusCode, b)
		}
	}

	t.Run("bad input", func(t *testing.T) { speechBadInput(t, n) })

	env := append(os.Environ(), "FUSION_BASE_URL="+n.URL(), "FUSION_FORWARD_URL="+fwd.URL(), "FUSION_API_KEY="+testKey,
		"FUSION_TTS_MODEL="+ttsModel, "FUSION_TTS_TEXT="+text, "FUSION_TTS_SAMPLES="+strconv.Itoa(want),
		"FUSION_TTS_SAMPLES_FAST="+strconv.Itoa(wantFast))
	out2 := runSuite(t, env, py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "testdata/test_openai_speech.py")
	t.Log(out2)
	if m := regexp.MustCompile(`(\d+) passed`).FindStringSubmatch(out2); m == nil || regexp.MustCompile(`\d+ (failed|errors?)\b`).MatchString(out2) {
		t.Errorf("unexpected pytest summary:\n%s", out2)
	}
}
