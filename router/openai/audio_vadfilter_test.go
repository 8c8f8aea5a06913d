package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"fusion/engine/audio"
	"fusion/engine/audio/audiotest"
	"fusion/engine/silero/silerotest"
	"fusion/node"
	"fusion/node/nodetest"
	"fusion/router/openai"
)

// vadSentences and vadPauses make the clip of the batched tests:
// espeak-ng sentences (about 33 s of speech, so that the batched mode
// has two 30-s pieces) with 1 to 1.6 s of silence between them; the
// vad_filter test takes the first three (one window).
var (
	vadSentences = []string{
		"Once upon a time there was a small village at the edge of a large forest.",
		"The people of the village were farmers, and every morning they walked to their fields.",
		"One day a young girl found a path that nobody had seen before.",
		"She followed it for an hour, until she reached a lake as clear as glass.",
		"In the middle of the lake stood a tower made of white stone.",
		"She wanted to know who lived there, so she built a boat from branches and rope.",
		"When she reached the tower, the door opened by itself, and a warm light shone from inside.",
		"She went back to tell the others what she had found.",
	}
	vadPauses = []float64{1.2, 1.6, 1.0, 1.4, 1.0, 1.5, 1.1, 1.3, 1.2}
)

// refVADSegment is a faster-whisper segment as the reference script
// writes it.
type refVADSegment struct {
	Seek       int     `json:"seek"`
	Start      float64 `json:"start"`
	End        float64 `json:"end"`
	Text       string  `json:"text"`
	Tokens     []int   `json:"tokens"`
	AvgLogprob float64 `json:"avg_logprob"`
}

// TestTranscriptionVADFilter: vad_filter=true equals faster-whisper's
// transcribe(vad_filter=True) (greedy) and batched=true its
// BatchedInferencePipeline(batch_size=1) on espeak-ng speech with pauses —
// tokens, texts, seeks and segment times — on a lone node; on a 2-node
// cluster where both hold the model, batched=true runs the two pieces on
// both nodes and answers the same as the lone node.
func TestTranscriptionVADFilter(t *testing.T) {
	models, fixture := asrModels(t)
	vad := silerotest.Dir(t)
	if err := os.Symlink(vad, filepath.Join(models, vadModel)); err != nil {
		t.Fatal(err)
	}
	// vad_filter on the first three sentences (one window); batched on
	// all of them (two pieces).
	short, samplesShort := vadClip(t, vadSentences[:3], vadPauses[:4])
	wav, samples := vadClip(t, vadSentences, vadPauses)
	dir := t.TempDir()
	shortF32, f32 := filepath.Join(dir, "short.f32"), filepath.Join(dir, "speech.f32")
	audiotest.WriteF32(t, shortF32, samplesShort)
	audiotest.WriteF32(t, f32, samples)
	py := audiotest.Python(t, "faster_whisper")
	out, err := exec.Command(py, "-c", `
import sys, json, numpy as np
from faster_whisper import WhisperModel, BatchedInferencePipeline
model = WhisperModel(sys.argv[1], device="cpu", compute_type="float32", cpu_threads=2)
def dump(segs):
    return [dict(seek=s.seek, start=s.start, end=s.end, text=s.text, tokens=s.tokens, avg_logprob=s.avg_logprob) for s in segs]
segs, _ = model.transcribe(np.fromfile(sys.argv[2], dtype="<f4"), beam_size=1, vad_filter=True)
vad = dump(segs)
segs, _ = BatchedInferencePipeline(model).transcribe(np.fromfile(sys.argv[3], dtype="<f4"), beam_size=1, batch_size=1)
print(json.dumps({"vad_filter": vad, "batched": dump(segs)}))
`, fixture, shortF32, f32).CombinedOutput()
	if err != nil {
		t.Fatalf("faster-whisper: %v\n%s", err, out)
	}
	var ref map[string][]refVADSegment
	if err := json.Unmarshal(out[bytes.LastIndexByte(bytes.TrimSpace(out), '\n')+1:], &ref); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	transcribe := func(t *testing.T, n *node.Node, wav []byte, fields map[string]string) openai.VerboseTranscription {
		t.Helper()
		f := map[string]string{"model": asrModel, "response_format": "verbose_json"}
		for k, v := range fields {
			f[k] = v
		}
		ct, body := multipartBody(t, f, wav)
		code, out := postAudio(t, n, "/v1/audio/transcriptions", ct, body)
		var v openai.VerboseTranscription
		if err := json.Unmarshal(out, &v); err != nil || code != http.StatusOK {
			t.Fatalf("%v: %d %.400s", fields, code, out)
		}
		return v
	}
	compare := func(t *testing.T, got openai.VerboseTranscription, samples []float32, want []refVADSegment) {
		t.Helper()
		t.Logf("%d segments, %.1f s: %q", len(got.Segments), got.Duration, got.Text)
		if len(got.Segments) != len(want) {
			t.Fatalf("%d segments, faster-whisper %d:\n ours %+v\n ref  %+v", len(got.Segments), len(want), got.Segments, want)
		}
		if math.Abs(got.Duration-float64(len(samples))/16000) > 1e-9 {
			t.Errorf("duration %v, want the original %v", got.Duration, float64(len(samples))/16000)
		}
		var maxLP float64
		for i, g := range got.Segments {
			w := want[i]
			if !slices.Equal(g.Tokens, w.Tokens) || g.Text != w.Text || g.Seek != w.Seek || g.Start != w.Start || g.End != w.End {
				t.Errorf("segment %d: ours %d %v–%v %q %v\n faster-whisper %d %v–%v %q %v", i, g.Seek, g.Start, g.End, g.Text, g.Tokens,
					w.Seek, w.Start, w.End, w.Text, w.Tokens)
			}
			maxLP = max(maxLP, math.Abs(g.AvgLogprob-w.AvgLogprob))
		}
		t.Logf("max |Δ avg_logprob| %.2g", maxLP)
		if maxLP > 1e-3 {
			t.Errorf("avg_logprob differs by %.2g", maxLP)
		}
	}

	lone := nodetest.Start(t, nodetest.Options{APIKey: testKey, ModelsDir: models})
	t.Run("vad_filter", func(t *testing.T) {
		compare(t, transcribe(t, lone, short, map[string]string{"vad_filter": "true"}), samplesShort, ref["vad_filter"])
	})
	var single openai.VerboseTranscription
	t.Run("batched", func(t *testing.T) {
		single = transcribe(t, lone, wav, map[string]string{"batched": "true"})
		compare(t, single, samples, ref["batched"])
	})
	t.Run("batched on two nodes", func(t *testing.T) {
		if single.Segments == nil {
			t.Skip("no single-node answer")
		}
		nodes := nodetest.StartCluster(t,
			nodetest.Options{APIKey: testKey, ModelsDir: models},
			nodetest.Options{APIKey: testKey, ModelsDir: models})
		a := nodes[0]
		// a splits once it knows b holds the model too.
		waitModel(t, a, asrModel, func(e modelEntry) bool { return len(e.Nodes) == 2 })
		// b must have run a share (and so loaded the model). A share b
		// refuses under load (overloaded, not yet reachable) runs on a
		// instead, with the same answer: ask again, a few times at most.
		for try := 1; ; try++ {
			got := transcribe(t, a, wav, map[string]string{"batched": "true"})
			if !reflect.DeepEqual(got, single) {
				t.Fatalf("two nodes answered\n %+v\none node\n %+v", got, single)
			}
			last, ok := modelBecomes(t, a, asrModel, 20*time.Second, func(e modelEntry) bool { return len(e.LoadedOn) == 2 })
			if ok {
				break
			}
			if try == 3 {
				t.Fatalf("after %d batched requests b never ran a share: %+v", try, last)
			}
			t.Logf("try %d: b ran no share (%+v); again", try, last)
		}
	})
}

// vadClip is espeak-ng speech of sentences with pauses as a 16-bit WAV,
// and the samples the server decodes from it (what the reference gets).
func vadClip(t *testing.T, sentences []string, pauses []float64) ([]byte, []float32) {
	t.Helper()
	wav := wav16(silerotest.SpeechWithPauses(t, sentences, pauses))
	sig, err := audio.DecodeBytes(context.Background(), wav, audio.Options{})
	if err != nil {
		t.Fatal(err)
	}
	x, err := audio.Mono16k(context.Background(), sig)
	if err != nil {
		t.Fatal(err)
	}
	return wav, x
}

// modelEntry is what the test reads of GET /admin/api/models.
type modelEntry struct {
	ID       string   `json:"id"`
	Nodes    []string `json:"nodes"`
	LoadedOn []string `json:"loaded_on"`
}

// waitModel polls GET /admin/api/models on n until model's entry
// satisfies ok (60 s at most).
func waitModel(t *testing.T, n *node.Node, model string, ok func(modelEntry) bool) {
	t.Helper()
	if last, done := modelBecomes(t, n, model, 60*time.Second, ok); !done {
		t.Fatalf("model %s never got there: last %+v", model, last)
	}
}

// modelBecomes polls n's model list until model's entry satisfies ok, for
// at most timeout; it returns the last entry seen and whether ok held.
func modelBecomes(t *testing.T, n *node.Node, model string, timeout time.Duration, ok func(modelEntry) bool) (modelEntry, bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last modelEntry
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, n.URL()+"/admin/api/models", nil)
		req.Header.Set("Authorization", "Bearer "+testKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var list struct{ Data []modelEntry }
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Data {
			if e.ID == model {
				if last = e; ok(e) {
					return e, true
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return last, false
}

// TestTranscriptionVADFilterBadInput: vad options out of range or
// unknown, vad_parameters without vad_filter, options batched cannot
// have and a VAD model that is not there are 400s naming the field.
func TestTranscriptionVADFilterBadInput(t *testing.T) {
	models, _ := asrModels(t)
	n := nodetest.Start(t, nodetest.Options{APIKey: testKey, ModelsDir: models})
	short := wav16(make([]float32, 16000))
	for _, c := range []struct {
		name   string
		fields map[string]string
		param  string
		msg    string
	}{
		{"vad_filter", map[string]string{"vad_filter": "perhaps"}, "vad_filter", "true or false"},
		{"batched", map[string]string{"batched": "2"}, "batched", "true or false"},
		{"params alone", map[string]string{"vad_parameters": `{"threshold": 0.4}`}, "vad_parameters", "needs vad_filter=true"},
		{"params not json", map[string]string{"vad_filter": "true", "vad_parameters": "threshold=0.4"}, "vad_parameters", "JSON object"},
		{"params unknown", map[string]string{"vad_filter": "true", "vad_parameters": `{"window_size_samples": 512}`}, "vad_parameters", "unknown option \"window_size_samples\""},
		{"params range", map[string]string{"vad_filter": "true", "vad_parameters": `{"threshold": 1.5}`}, "vad_parameters", "between 0.01 and 0.99"},
		{"params type", map[string]string{"vad_filter": "true", "vad_parameters": `{"speech_pad_ms": "lots"}`}, "vad_parameters", "whole number"},
		{"batched words", map[string]string{"batched": "true", "response_format": "verbose_json", "word_timestamps": "true"}, "word_timestamps", "batched"},
		{"batched max_tokens", map[string]string{"batched": "true", "max_tokens": "5"}, "max_tokens", "batched"},
		{"no VAD model", map[string]string{"vad_filter": "true"}, "vad_filter", `"silero-vad"`},
		{"no VAD model batched", map[string]string{"batched": "true"}, "batched", "--vad-model"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := map[string]string{"model": asrModel}
			for k, v := range c.fields {
				f[k] = v
			}
			ct, body := multipartBody(t, f, short)
			code, out := postAudio(t, n, "/v1/audio/transcriptions", ct, body)
			var e struct {
				Error struct{ Message, Type, Param string }
			}
			if err := json.Unmarshal(out, &e); err != nil || code != http.StatusBadRequest {
				t.Fatalf("%d %s", code, out)
			}
			if e.Error.Param != c.param || !strings.Contains(e.Error.Message, c.msg) {
				t.Fatalf("error %+v, want param %q and a message with %q", e.Error, c.param, c.msg)
			}
		})
	}
}
