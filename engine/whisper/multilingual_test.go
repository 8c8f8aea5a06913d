package whisper

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"fusion/engine/audio/audiotest"
	"fusion/engine/backend/cpu"
)

// tinyMulti is the random-weight multilingual Whisper
// (audiotest.WhisperTinyMultilingual), loaded once per test binary.
var tinyMulti struct {
	once sync.Once
	m    *Model
	dir  string
	err  error
}

func loadTinyMulti(t *testing.T) *Model {
	t.Helper()
	dir := audiotest.WhisperTinyMultilingual(t)
	tinyMulti.once.Do(func() {
		tinyMulti.dir = dir
		tinyMulti.m, tinyMulti.err = Load(context.Background(), dir, cpu.New(cpu.Options{}))
	})
	if tinyMulti.err != nil {
		t.Fatal(tinyMulti.err)
	}
	return tinyMulti.m
}

// TestMultilingualLoad reads the language tokens of lang_ids and checks
// the request's language and task against them.
func TestMultilingualLoad(t *testing.T) {
	m := loadTinyMulti(t)
	if !m.Tokens.Multilingual || len(m.Tokens.Languages) != 99 || m.Tokens.Languages[0] != (Language{"en", m.Tokens.SOT + 1}) {
		t.Fatalf("multilingual %v, %d languages, first %+v (sot %d)", m.Tokens.Multilingual, len(m.Tokens.Languages), m.Tokens.Languages[:1], m.Tokens.SOT)
	}
	if m.Tokens.EOT != 50257 || m.Tokens.TimestampBegin != 50364 {
		t.Errorf("eot %d, timestamp begin %d: want the multilingual 50257, 50364", m.Tokens.EOT, m.Tokens.TimestampBegin)
	}
	de, _ := m.languageToken("de")
	if got := m.sotSequence("de", true); !slices.Equal(got, []int{m.Tokens.SOT, de, m.Tokens.Translate}) {
		t.Errorf("sot sequence %v", got)
	}
	for lang, want := range map[string]error{"": nil, "de": nil, "DE": nil, "xx": ErrLanguage} {
		if _, err := m.language(Options{Language: lang}); !errors.Is(err, want) {
			t.Errorf("language %q: %v, want %v", lang, err, want)
		}
	}
}

// refTranscript is faster-whisper's transcription info and segments.
type refTranscript struct {
	Language    string       `json:"language"`
	Probability float64      `json:"language_probability"`
	Segments    []refSegment `json:"segments"`
}

// TestMultilingualMatchesFasterWhisper transcribes espeak-ng speech with
// the multilingual model, once detecting the language and once
// translating from a given language, greedily (temperature 0 only: the
// random model's decodes would fail the thresholds and fall back to
// sampling, which cannot be matched draw for draw), and wants
// faster-whisper's detected language, its probability within 1e-4 and
// the same tokens, segment for segment.
func TestMultilingualMatchesFasterWhisper(t *testing.T) {
	m := loadTinyMulti(t)
	dir := t.TempDir()
	cases := []struct {
		name, lang string
		translate  bool
		samples    []float32
	}{
		{"english detected", "", false, speech16k(t, "Good morning everyone. Today we will talk about the weather.")},
		{"german detected", "", false, speech16k(t, "Guten Morgen. Heute sprechen wir über das Wetter im Norden.", "-v", "de")},
		{"german translated", "de", true, speech16k(t, "Guten Morgen. Heute sprechen wir über das Wetter im Norden.", "-v", "de")},
	}
	args := []string{tinyMulti.dir}
	for i, c := range cases {
		f := filepath.Join(dir, string(rune('a'+i))+".f32")
		audiotest.WriteF32(t, f, c.samples)
		task := "transcribe"
		if c.translate {
			task = "translate"
		}
		args = append(args, f, c.lang, task)
	}
	out := runPython(t, []string{"faster_whisper"}, `
import sys, json, dataclasses, numpy as np
from faster_whisper import WhisperModel
model = WhisperModel(sys.argv[1], device="cpu", compute_type="float32", cpu_threads=2)
res = []
for i in range(2, len(sys.argv), 3):
    path, lang, task = sys.argv[i:i+3]
    segs, info = model.transcribe(np.fromfile(path, dtype="<f4"), beam_size=1, temperature=0, language=lang or None, task=task)
    segs = [{k: v for k, v in dataclasses.asdict(s).items() if k != "words"} for s in segs]
    res.append({"language": info.language, "language_probability": info.language_probability, "segments": segs})
print(json.dumps(res))
`, args...)
	var ref []refTranscript
	if err := json.Unmarshal(out[bytes.LastIndexByte(bytes.TrimSpace(out), '\n')+1:], &ref); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := DefaultOptions()
			o.Temperatures, o.Language, o.Translate = []float64{0}, c.lang, c.translate
			res, err := m.Transcribe(context.Background(), c.samples, o)
			if err != nil {
				t.Fatal(err)
			}
			want := ref[i]
			t.Logf("language %s p=%.6f (faster-whisper %s p=%.6f), %d segments", res.Language, res.LanguageProbability,
				want.Language, want.Probability, len(res.Segments))
			if res.Language != want.Language || math.Abs(res.LanguageProbability-want.Probability) > 1e-4 {
				t.Errorf("language %s p=%v, faster-whisper %s p=%v", res.Language, res.LanguageProbability, want.Language, want.Probability)
			}
			if len(res.Segments) != len(want.Segments) {
				t.Fatalf("%d segments, faster-whisper %d", len(res.Segments), len(want.Segments))
			}
			for j, g := range res.Segments {
				w := want.Segments[j]
				if !slices.Equal(g.Tokens, w.Tokens) || g.Start != w.Start || g.End != w.End || g.Seek != w.Seek {
					t.Errorf("segment %d: ours %v–%v seek %d %v, faster-whisper %v–%v seek %d %v", j, g.Start, g.End, g.Seek, g.Tokens, w.Start, w.End, w.Seek, w.Tokens)
				}
			}
		})
	}
}
