package backend

import (
	"strings"
	"testing"
)

type shape struct{ rows, cols int }

func (s shape) Rows() int { return s.rows }
func (s shape) Cols() int { return s.cols }

func TestEncoderShape(t *testing.T) {
	cases := []struct {
		name    string
		q, k, v shape
		heads   int
		lens    []int
		hd      int
		err     string
	}{
		{"ok", shape{5, 32}, shape{5, 32}, shape{5, 32}, 4, []int{2, 3}, 8, ""},
		{"rows differ from lens", shape{5, 32}, shape{5, 32}, shape{5, 32}, 4, []int{2, 2}, 0, "4 rows in sequences"},
		{"empty sequence", shape{5, 32}, shape{5, 32}, shape{5, 32}, 4, []int{5, 0}, 0, "sequence of 0 rows"},
		{"k narrower", shape{5, 32}, shape{5, 16}, shape{5, 32}, 4, []int{5}, 0, "k [5, 16]"},
		{"heads do not divide", shape{5, 30}, shape{5, 30}, shape{5, 30}, 4, []int{5}, 0, "4 heads"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hd, err := EncoderShape(c.q, c.k, c.v, c.heads, c.lens)
			if c.err == "" {
				if err != nil || hd != c.hd {
					t.Fatalf("head dim %d, %v; want %d", hd, err, c.hd)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("error %v, want one with %q", err, c.err)
			}
		})
	}
}
