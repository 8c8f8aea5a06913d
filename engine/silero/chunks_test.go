package silero_test

import (
	"encoding/json"
	"os/exec"
	"slices"
	"testing"

	"fusion/engine"
	"fusion/engine/audio/audiotest"
	"fusion/engine/silero"
)

// TestTimeMapMatchesFasterWhisper: collect_chunks' pieces
// (engine.TranscribePieces, 30 s at most) and SpeechTimestampsMap's
// chunk indices and original times (silero.TimeMap) equal
// faster-whisper's on segments with silences, for times inside, at the
// ends of and past the speech, start and end alike.
func TestTimeMapMatchesFasterWhisper(t *testing.T) {
	segs := []silero.Segment{{Start: 8000, End: 168000}, {Start: 200000, End: 520000}, {Start: 521000, End: 700000},
		{Start: 900000, End: 1000000}}
	times := []float64{0, 0.5, 9.999, 10, 10.0001, 12.345, 29.99, 30, 30.0625, 31.27, 40, 41.875, 48.115, 60}
	py := audiotest.Python(t, "faster_whisper")
	in, _ := json.Marshal(map[string]any{"segs": segs, "times": times})
	out, err := exec.Command(py, "-c", `
import sys, json
from faster_whisper.vad import SpeechTimestampsMap, collect_chunks
import numpy as np
d = json.loads(sys.argv[1])
chunks = [{"start": s["Start"], "end": s["End"]} for s in d["segs"]]
m = SpeechTimestampsMap(chunks, 16000)
res = {"pieces": [[round(c["offset"] * 16000), round(c["duration"] * 16000)] for c in collect_chunks(np.zeros(1000000, dtype=np.float32), chunks, max_duration=30)[1]],
       "start": [[m.get_chunk_index(t), m.get_original_time(t)] for t in d["times"]],
       "end": [[m.get_chunk_index(t, is_end=True), m.get_original_time(t, is_end=True)] for t in d["times"]]}
print(json.dumps(res))
`, string(in)).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	var ref struct {
		Pieces     [][2]int
		Start, End [][2]float64
	}
	if err := json.Unmarshal(out, &ref); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var speech []engine.SpeechRange
	for _, s := range segs {
		speech = append(speech, engine.SpeechRange{Start: s.Start, End: s.End})
	}
	var pieces [][2]int
	for _, p := range engine.TranscribePieces(speech) {
		pieces = append(pieces, [2]int{p.Offset, p.Len})
	}
	if !slices.Equal(pieces, ref.Pieces) {
		t.Errorf("pieces %v, faster-whisper %v", pieces, ref.Pieces)
	}
	m := silero.NewTimeMap(segs)
	for i, tm := range times {
		for _, c := range []struct {
			isEnd bool
			want  [2]float64
		}{{false, ref.Start[i]}, {true, ref.End[i]}} {
			chunk := m.Chunk(tm, c.isEnd)
			if got := m.Original(tm, chunk); float64(chunk) != c.want[0] || got != c.want[1] {
				t.Errorf("time %v (end %v): chunk %d, original %v; faster-whisper %v, %v", tm, c.isEnd, chunk, got, c.want[0], c.want[1])
			}
		}
	}
	x := make([]float32, 1000000)
	for i := range x {
		x[i] = float32(i)
	}
	cat := silero.Concat(x, segs)
	if len(cat) != 160000+320000+179000+100000 || cat[0] != 8000 || cat[160000] != 200000 || cat[len(cat)-1] != 999999 {
		t.Errorf("concat: %d samples, %v %v %v", len(cat), cat[0], cat[160000], cat[len(cat)-1])
	}
	if err := silero.CheckSegments(segs, 1000000); err != nil {
		t.Error(err)
	}
	for _, bad := range [][]silero.Segment{{{Start: -1, End: 5}}, {{Start: 5, End: 5}}, {{Start: 0, End: 10}, {Start: 9, End: 20}}, {{Start: 0, End: 1000001}}} {
		if silero.CheckSegments(bad, 1000000) == nil {
			t.Errorf("segments %v accepted", bad)
		}
	}
}
