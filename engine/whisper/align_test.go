package whisper

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"fusion/engine/audio/audiotest"
)

// TestMedianFilterAndDTW checks the alignment's building blocks on
// values worked out by hand from ctranslate2's code: the median filter
// reflects at the edges, and the path of greatest total steps diagonally
// where the values say so.
func TestMedianFilterAndDTW(t *testing.T) {
	out := make([]float32, 5)
	medianFilter([]float32{5, 1, 4, 2, 3}, out, 3)
	// Windows with reflection: [1 5 1] [5 1 4] [1 4 2] [4 2 3] [2 3 2].
	if want := []float32{1, 4, 2, 3, 2}; !slices.Equal(out, want) {
		t.Errorf("median filter %v, want %v", out, want)
	}
	short := make([]float32, 2)
	medianFilter([]float32{9, 7}, short, 7)
	if !slices.Equal(short, []float32{9, 7}) {
		t.Errorf("a row shorter than the half width is kept: %v", short)
	}
	for _, c := range []struct {
		x    [][]float32
		want [][2]int
	}{
		// Off the diagonal costs: the diagonal.
		{[][]float32{{1, -1, -1}, {-1, 1, -1}, {-1, -1, 1}}, [][2]int{{0, 0}, {1, 1}, {2, 2}}},
		// Zeros off it cost nothing: on a tie the step is to the left
		// (in time) before the diagonal, as ctranslate2 breaks ties.
		{[][]float32{{1, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}, [][2]int{{0, 0}, {0, 1}, {1, 1}, {1, 2}, {2, 2}, {2, 3}}},
	} {
		if path := negativeDTW(c.x); !slices.Equal(path, c.want) {
			t.Errorf("path %v, want %v", path, c.want)
		}
	}
}

// refWord is a faster-whisper Word.
type refWord struct {
	Start       float64 `json:"start"`
	End         float64 `json:"end"`
	Word        string  `json:"word"`
	Probability float64 `json:"probability"`
}

// TestWordTimestampsMatchFasterWhisper transcribes espeak-ng speech with
// word_timestamps on both sides (tiny.en, greedy, faster-whisper's other
// defaults) and wants the same segments (tokens, bounds moved to the
// words) and the same words, each start and end within 0.02 s (one
// alignment step) and probability within 1e-3.
func TestWordTimestampsMatchFasterWhisper(t *testing.T) {
	m := loadTinyEn(t)
	dir := t.TempDir()
	samples := speech16k(t, "\"Thank you,\" she said (quietly). It has been raining for three days!")
	file := filepath.Join(dir, "words.f32")
	audiotest.WriteF32(t, file, samples)
	out := runPython(t, []string{"faster_whisper"}, `
import sys, json, dataclasses, numpy as np
from faster_whisper import WhisperModel
model = WhisperModel(sys.argv[1], device="cpu", compute_type="float32", cpu_threads=2)
segs, info = model.transcribe(np.fromfile(sys.argv[2], dtype="<f4"), beam_size=1, word_timestamps=True)
print(json.dumps([dataclasses.asdict(s) for s in segs]))
`, tinyEn.dir, file)
	var ref []struct {
		refSegment
		Words []refWord `json:"words"`
	}
	if err := json.Unmarshal(out[bytes.LastIndexByte(bytes.TrimSpace(out), '\n')+1:], &ref); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	o := DefaultOptions()
	o.WordTimestamps = true
	res, err := m.Transcribe(context.Background(), samples, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Segments) != len(ref) {
		t.Fatalf("%d segments, faster-whisper %d", len(res.Segments), len(ref))
	}
	var maxT, maxP float64
	words := 0
	for i, g := range res.Segments {
		w := ref[i]
		if !slices.Equal(g.Tokens, w.Tokens) || math.Abs(g.Start-w.Start) > 0.02 || math.Abs(g.End-w.End) > 0.02 {
			t.Errorf("segment %d: ours %v–%v %q, faster-whisper %v–%v %q", i, g.Start, g.End, g.Text, w.Start, w.End, w.Text)
		}
		if len(g.Words) != len(w.Words) {
			t.Errorf("segment %d: %d words %+v, faster-whisper %d %+v", i, len(g.Words), g.Words, len(w.Words), w.Words)
			continue
		}
		for j, gw := range g.Words {
			ww := w.Words[j]
			words++
			maxT = max(maxT, math.Abs(gw.Start-ww.Start), math.Abs(gw.End-ww.End))
			maxP = max(maxP, math.Abs(gw.Probability-ww.Probability))
			if gw.Word != ww.Word || math.Abs(gw.Start-ww.Start) > 0.02+1e-9 || math.Abs(gw.End-ww.End) > 0.02+1e-9 || math.Abs(gw.Probability-ww.Probability) > 1e-3 {
				t.Errorf("segment %d word %d: ours %q %v–%v p=%.4f, faster-whisper %q %v–%v p=%.4f", i, j,
					gw.Word, gw.Start, gw.End, gw.Probability, ww.Word, ww.Start, ww.End, ww.Probability)
			}
		}
	}
	t.Logf("%d segments, %d words: max |Δ time| %.3g s, max |Δ probability| %.2g", len(res.Segments), words, maxT, maxP)
}
