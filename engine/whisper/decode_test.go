package whisper

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"fusion/engine/audio/logmel"
	"fusion/engine/backend/cpu"
)

// TestSplit cuts timestamped token sequences into segments as
// faster-whisper's _split_segments_by_timestamps does (expected values
// worked out from its code; tb is <|0.00|>).
func TestSplit(t *testing.T) {
	const tb = 100
	m := &Model{Tokens: Special{TimestampBegin: tb, EOT: 50}}
	cases := []struct {
		name     string
		tokens   []int
		segs     []rawSegment
		nextSeek int
	}{
		{"pairs, single ending", []int{tb, 1, 2, tb + 50, tb + 50, 3, tb + 100},
			[]rawSegment{{0.3, 1.3, []int{tb, 1, 2, tb + 50}, nil}, {1.3, 2.3, []int{tb + 50, 3, tb + 100}, nil}}, 30 + 3000},
		{"pairs, unfinished last", []int{tb, 1, tb + 50, tb + 50, 3},
			[]rawSegment{{0.3, 1.3, []int{tb, 1, tb + 50}, nil}}, 30 + 100},
		{"one pair only", []int{tb + 10, 1, 2, tb + 60},
			[]rawSegment{{0.3, 0.3 + 1.2, []int{tb + 10, 1, 2, tb + 60}, nil}}, 30 + 3000}, // ends at the last timestamp
		{"no timestamps", []int{1, 2, 3},
			[]rawSegment{{0.3, 0.3 + 29.9, []int{1, 2, 3}, nil}}, 30 + 3000},
		{"only the first timestamp", []int{tb, 1, 2},
			[]rawSegment{{0.3, 0.3 + 29.9, []int{tb, 1, 2}, nil}}, 30 + 3000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			segs, seek := m.split(c.tokens, 0.3, 3000, 29.9, 30)
			if seek != c.nextSeek || len(segs) != len(c.segs) {
				t.Fatalf("seek %d, %d segments %+v; want %d, %+v", seek, len(segs), segs, c.nextSeek, c.segs)
			}
			for i, s := range segs {
				w := c.segs[i]
				if !close(s.start, w.start) || !close(s.end, w.end) || !reflect.DeepEqual(s.tokens, w.tokens) {
					t.Errorf("segment %d: %+v, want %+v", i, s, w)
				}
			}
		})
	}
}

func close(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// TestLanguageAndTask: an English-only model decodes English only and
// cannot translate; the errors say so.
func TestLanguageAndTask(t *testing.T) {
	m := loadTinyEn(t)
	x := make([]float32, 16000)
	for _, c := range []struct {
		o    func(*Options)
		want error
	}{
		{func(o *Options) { o.Language = "fr" }, ErrLanguage},
		{func(o *Options) { o.Translate = true }, ErrTranslate},
	} {
		o := DefaultOptions()
		c.o(&o)
		if _, err := m.Transcribe(context.Background(), x, o); !errors.Is(err, c.want) {
			t.Errorf("error %v, want %v", err, c.want)
		}
	}
	for _, lang := range []string{"", "en", "EN"} {
		if got, err := m.language(Options{Language: lang}); got != "en" || err != nil {
			t.Errorf("language %q: %q, %v", lang, got, err)
		}
	}
	// Word timestamps of a model without alignment heads fail before
	// any decoding.
	noHeads := *m
	noHeads.Config.AlignmentHeads = nil
	o := DefaultOptions()
	o.WordTimestamps = true
	if _, err := noHeads.Transcribe(context.Background(), x, o); !errors.Is(err, ErrWordTimestamps) {
		t.Errorf("word timestamps without alignment heads: %v, want %v", err, ErrWordTimestamps)
	}
}

// TestLoadChecksAlignmentHeads: a config.json whose alignment heads lie
// outside the model's layers and heads is not a Whisper model this
// package loads (found at load, not after the first window's decode).
func TestLoadChecksAlignmentHeads(t *testing.T) {
	loadTinyEn(t)
	dir := t.TempDir()
	for _, f := range []string{"model.bin", "tokenizer.json"} {
		if err := os.Symlink(filepath.Join(tinyEn.dir, f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"alignment_heads": [[1, 0], [4, 0]]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if m, err := Load(context.Background(), dir, cpu.New(cpu.Options{})); !errors.Is(err, ErrNotWhisper) || !strings.Contains(fmt.Sprint(err), "alignment head [4 0]") {
		if m != nil {
			m.Close()
		}
		t.Errorf("Load: %v, want %v naming head [4 0]", err, ErrNotWhisper)
	}
}

// TestTemperatureFallback makes every decode of a window fail the
// log-probability threshold (0: no decode is that sure), so each
// temperature is tried, and the likeliest decode is kept with the last
// temperature, as faster-whisper's generate_with_fallback does; sampling
// with the same seed gives the same decode. One encoded window serves
// every decode (the encoder is what costs under -race).
func TestTemperatureFallback(t *testing.T) {
	m := loadTinyEn(t)
	ext, err := logmel.New(m.Dims.Mels)
	if err != nil {
		t.Fatal(err)
	}
	feats, err := ext.Window(context.Background(), speech16k(t, "It has been raining for three days."))
	if err != nil {
		t.Fatal(err)
	}
	w, err := m.Encode(context.Background(), feats.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	o := DefaultOptions()
	o.Temperatures, o.BestOf, o.LogProbThreshold, o.NoSpeechThreshold = []float64{0, 0.6}, 2, 0, 2
	run := func() (generation, float64) {
		g, _, temp, _, err := m.fallback(context.Background(), w, m.prompt(nil, m.sotSequence("en", false), o), o, 0, rand.New(rand.NewPCG(7, 0x5eed)))
		if err != nil {
			t.Fatal(err)
		}
		return g, temp
	}
	a, temp := run()
	b, _ := run()
	if temp != 0.6 {
		t.Errorf("temperature %v, want the last one, 0.6", temp)
	}
	if len(a.tokens) == 0 || !reflect.DeepEqual(a, b) {
		t.Errorf("the same seed gave\n%+v\n%+v", a, b)
	}
	t.Logf("%q", m.Text(a.tokens))
}

// TestMaxTokens caps the tokens of a transcription: the capped
// transcript's tokens are a prefix of the uncapped one's (greedy decoding
// is the same up to the cut; an unfinished last segment is dropped), at
// most the cap, and the cap ends the transcription.
func TestMaxTokens(t *testing.T) {
	m := loadTinyEn(t)
	x := speech16k(t, "It has been raining for three days. The rivers are very high.")
	o := DefaultOptions()
	o.Temperatures = []float64{0}
	tokens := func(r *Result) []int {
		var all []int
		for _, s := range r.Segments {
			all = append(all, s.Tokens...)
		}
		return all
	}
	full, err := m.Transcribe(context.Background(), x, o)
	if err != nil {
		t.Fatal(err)
	}
	want := tokens(full)
	o.MaxTokens = len(want) - 4
	capped, err := m.Transcribe(context.Background(), x, o)
	if err != nil {
		t.Fatal(err)
	}
	got := tokens(capped)
	t.Logf("%d tokens %q; capped at %d: %d tokens %q", len(want), full.Text, o.MaxTokens, len(got), capped.Text)
	if len(got) == 0 || len(got) > o.MaxTokens || !slices.Equal(got, want[:len(got)]) {
		t.Errorf("capped tokens %v, want a non-empty prefix of %v of at most %d", got, want, o.MaxTokens)
	}
}
