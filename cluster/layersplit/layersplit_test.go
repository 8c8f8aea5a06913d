package layersplit

import (
	"slices"
	"testing"
)

func TestSplit(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		name string
		m    Model
		k    int
		caps []int64
		want []int // nil: no split
	}{
		{"even", Model{Layers: 6}, 2, nil, []int{0, 3, 6}},
		{"odd: the first stage takes the extra", Model{Layers: 7}, 2, nil, []int{0, 4, 7}},
		{"one stage", Model{Layers: 6, Head: 9.9}, 1, nil, []int{0, 6}},
		{"head on the last stage", Model{Layers: 12, Head: 9.9}, 2, nil, []int{0, 11, 12}},
		{"head, 6 layers", Model{Layers: 6, Head: 9.9}, 2, nil, []int{0, 5, 6}},
		{"head, 28 layers in 2", Model{Layers: 28, Head: 9.9}, 2, nil, []int{0, 19, 28}},
		{"head, 28 layers in 3", Model{Layers: 28, Head: 9.9}, 3, nil, []int{0, 13, 25, 28}},
		{"one layer at least", Model{Layers: 3, Head: 50}, 3, nil, []int{0, 1, 2, 3}},
		// 1 GiB a layer, 2 GiB of head: compute alone would cut 6 + 4.
		{"memory bounds the last stage", Model{Layers: 10, Head: 2, Need: 12 * gib}, 2, []int64{100 * gib, 5 * gib}, []int{0, 7, 10}},
		{"memory bounds the first stage", Model{Layers: 10, Need: 10 * gib}, 2, []int64{3 * gib, 100 * gib}, []int{0, 3, 10}},
		{"uneven memory with room", Model{Layers: 10, Need: 10 * gib}, 2, []int64{9 * gib, 6 * gib}, []int{0, 5, 10}},
		{"a stage cannot hold one layer", Model{Layers: 10, Need: 10 * gib}, 2, []int64{100 * gib, gib / 2}, nil},
		{"the head alone overflows the last", Model{Layers: 10, Head: 2, Need: 12 * gib}, 2, []int64{100 * gib, 2 * gib}, nil},
		{"not enough in all", Model{Layers: 10, Need: 10 * gib}, 3, []int64{3 * gib, 3 * gib, 3 * gib}, nil},
		{"unknown need is unbounded", Model{Layers: 4}, 2, []int64{0, 0}, []int{0, 2, 4}},
		{"more stages than layers", Model{Layers: 2}, 3, nil, nil},
		{"caps of another length", Model{Layers: 6}, 2, []int64{1}, nil},
		{"no stage", Model{Layers: 6}, 0, nil, nil},
		// Gemma 4 E2B: layers 15–34 read the KV of layers 13 and 14, so
		// no later stage starts past 13.
		{"max cut", Model{Layers: 35, MaxCut: 13}, 2, nil, []int{0, 13, 35}},
		{"max cut, 3 stages", Model{Layers: 35, MaxCut: 13}, 3, nil, []int{0, 7, 13, 35}},
		{"max cut above the even split", Model{Layers: 6, MaxCut: 5}, 2, nil, []int{0, 3, 6}},
		{"max cut leaves too few layers", Model{Layers: 6, MaxCut: 1}, 3, nil, nil},
		{"max cut and a small last node", Model{Layers: 10, Need: 10 * gib, MaxCut: 4}, 2, []int64{100 * gib, 5 * gib}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Split(tc.m, tc.k, tc.caps)
			if ok != (tc.want != nil) || !slices.Equal(got, tc.want) {
				t.Fatalf("Split = %v, %v; want %v", got, ok, tc.want)
			}
			for i := 0; ok && i < tc.k; i++ {
				if b := tc.m.StageBytes(got[i], got[i+1]); tc.caps != nil && b > tc.caps[i] {
					t.Fatalf("stage %d holds %d bytes over its %d", i, b, tc.caps[i])
				}
			}
		})
	}
}

func TestStageBytes(t *testing.T) {
	m := Model{Layers: 10, Head: 2, Need: 1200}
	if got := m.StageBytes(0, 3); got != 300 {
		t.Errorf("3 layers: %d, want 300", got)
	}
	if got := m.StageBytes(7, 10); got != 500 {
		t.Errorf("3 layers and the head: %d, want 500", got)
	}
	if got := (Model{Layers: 10}).StageBytes(7, 10); got != 0 {
		t.Errorf("unknown need: %d, want 0", got)
	}
}
