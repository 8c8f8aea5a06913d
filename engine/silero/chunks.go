package silero

import (
	"fmt"
	"sort"
	"strconv"
)

// CheckSegments reports segments that are not speech of a signal of n
// samples: empty, out of [0, n), or not in increasing order without
// overlap.
func CheckSegments(segs []Segment, n int) error {
	prev := 0
	for i, s := range segs {
		if s.Start < prev || s.End <= s.Start || s.End > n {
			return fmt.Errorf("speech segment %d [%d, %d) is not within [%d, %d) after the one before", i, s.Start, s.End, prev, n)
		}
		prev = s.End
	}
	return nil
}

// Concat puts the speech segments of x end to end (faster-whisper's
// transcribe with vad_filter: np.concatenate of collect_chunks' audio).
func Concat(x []float32, segs []Segment) []float32 {
	n := 0
	for _, s := range segs {
		n += s.End - s.Start
	}
	out := make([]float32, 0, n)
	for _, s := range segs {
		out = append(out, x[s.Start:s.End]...)
	}
	return out
}

// TimeMap takes times on the speech-only signal back to the original
// one: faster-whisper's SpeechTimestampsMap (times rounded to 0.01 s as
// there).
type TimeMap struct {
	chunkEnd      []int     // each segment's end on the speech-only signal, in samples
	silenceBefore []float64 // the silence cut before each segment, in seconds
}

// NewTimeMap is the map of the speech segments of a signal.
func NewTimeMap(segs []Segment) *TimeMap {
	m := &TimeMap{}
	prevEnd, silent := 0, 0
	for _, s := range segs {
		silent += s.Start - prevEnd
		prevEnd = s.End
		m.chunkEnd = append(m.chunkEnd, s.End-silent)
		m.silenceBefore = append(m.silenceBefore, float64(silent)/SampleRate)
	}
	return m
}

// Chunk is the segment a time of the speech-only signal falls in; an
// end time exactly at a segment's end belongs to that segment
// (get_chunk_index).
func (m *TimeMap) Chunk(t float64, isEnd bool) int {
	sample := int(t * SampleRate)
	if isEnd {
		for i, e := range m.chunkEnd {
			if e == sample {
				return i
			}
		}
	}
	i := sort.Search(len(m.chunkEnd), func(i int) bool { return m.chunkEnd[i] > sample })
	return min(i, len(m.chunkEnd)-1)
}

// Original is time t of the speech-only signal on the original one, as
// a time of segment chunk, rounded to 0.01 s (get_original_time).
func (m *TimeMap) Original(t float64, chunk int) float64 {
	if len(m.silenceBefore) == 0 {
		return Round(t, 2)
	}
	return Round(m.silenceBefore[chunk]+t, 2)
}

// Round is Python's round(x, digits): to the nearest decimal, halves to
// even on the exact binary value.
func Round(x float64, digits int) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', digits, 64), 64)
	return v
}
