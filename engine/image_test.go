package engine

import (
	"slices"
	"testing"
)

func TestPreviewSteps(t *testing.T) {
	for _, c := range []struct {
		partials, steps int
		want            []int
	}{
		{0, 4, nil},
		{1, 4, []int{2}},
		{2, 4, []int{1, 2}},
		{3, 4, []int{1, 2, 3}},
		{3, 2, []int{1, 2}},
		{2, 1, []int{1}},
		{1, 20, []int{10}},
		{3, 20, []int{5, 10, 15}},
	} {
		if got := PreviewSteps(c.partials, c.steps); !slices.Equal(got, c.want) {
			t.Errorf("PreviewSteps(%d, %d) = %v, want %v", c.partials, c.steps, got, c.want)
		}
	}
}
