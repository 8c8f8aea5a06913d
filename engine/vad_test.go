package engine

import (
	"reflect"
	"testing"
)

// TestSharePieces: runs of similar speech length, contiguous, at least
// one piece each, never more runs than pieces or nodes.
func TestSharePieces(t *testing.T) {
	p := func(lens ...int) []SpeechPiece {
		var out []SpeechPiece
		off := 0
		for _, l := range lens {
			out = append(out, SpeechPiece{Offset: off, Len: l})
			off += l
		}
		return out
	}
	for _, c := range []struct {
		name   string
		pieces []SpeechPiece
		nodes  int
		want   [][2]int
	}{
		{"one node", p(30, 30, 7), 1, [][2]int{{0, 3}}},
		{"full pieces and a tail", p(30, 30, 7), 2, [][2]int{{0, 1}, {1, 3}}},
		{"even", p(20, 20, 20, 20), 2, [][2]int{{0, 2}, {2, 4}}},
		{"three nodes", p(20, 20, 20, 20), 3, [][2]int{{0, 1}, {1, 3}, {3, 4}}},
		{"more nodes than pieces", p(30, 4), 5, [][2]int{{0, 1}, {1, 2}}},
		{"long tail first", p(4, 30, 30, 30), 2, [][2]int{{0, 2}, {2, 4}}},
		{"none", nil, 3, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := SharePieces(c.pieces, c.nodes); !reflect.DeepEqual(got, c.want) {
				t.Errorf("%v over %d nodes: %v, want %v", c.pieces, c.nodes, got, c.want)
			}
		})
	}
}
