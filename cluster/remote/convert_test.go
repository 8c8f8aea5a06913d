package remote

import (
	"math"
	"reflect"
	"testing"

	"fusion/cluster/enginepb"
	"fusion/engine"
)

// TestTranscribeConvert: a transcription's request and result cross the
// wire whole, max_tokens and the language's probability included; a
// max_tokens beyond int32 saturates (the endpoints cap it far below).
func TestTranscribeConvert(t *testing.T) {
	req := &engine.TranscribeRequest{Model: "w", Audio: []byte("RIFF"), Language: "de", Translate: true, Temperature: 0.2,
		WordTimestamps: true, MaxTokens: 77, MaxBytes: 1 << 20, MaxSeconds: 60,
		VADFilter: true, Speech: []engine.SpeechRange{{Start: 160, End: 32000}, {Start: 40000, End: 90000}}, Batched: true, Pieces: [2]int{1, 3}}
	if got := transcribeRequestFromPB(transcribeRequestToPB(req)); !reflect.DeepEqual(got, req) {
		t.Errorf("request %+v, sent %+v", got, req)
	}
	// Malformed ranges and pieces arrive as values the runner refuses.
	bad := transcribeRequestFromPB(&enginepb.TranscribeRequest{VadFilter: true, Speech: []int64{5, 9, 12}, Pieces: []int32{1}})
	if want := []engine.SpeechRange{{Start: 5, End: 9}, {Start: 12, End: -1}}; !reflect.DeepEqual(bad.Speech, want) || bad.Pieces != [2]int{-1, -1} {
		t.Errorf("odd speech and one piece bound became %v %v", bad.Speech, bad.Pieces)
	}
	if got := transcribeRequestToPB(&engine.TranscribeRequest{MaxTokens: math.MaxInt32 + 5}).GetMaxTokens(); got != math.MaxInt32 {
		t.Errorf("max_tokens beyond int32 became %d", got)
	}
	res := &engine.TranscribeResult{Text: "hallo", Language: "de", LanguageProbability: 0.875, Duration: 1.5,
		Segments: []engine.TranscribeSegment{{ID: 1, Start: 0, End: 1.5, Text: " hallo", Tokens: []int{50364, 7, 50439},
			Words: []engine.TranscribeWord{{Start: 0.1, End: 0.6, Word: " hallo", Probability: 0.9}}}}}
	if got := transcribeResultFromPB(transcribeResultToPB(res)); !reflect.DeepEqual(got, res) {
		t.Errorf("result %+v, sent %+v", got, res)
	}
}
