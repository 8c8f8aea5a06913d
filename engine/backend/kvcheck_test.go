package backend

import (
	"strings"
	"testing"
)

func TestKVSpecChecks(t *testing.T) {
	s := KVSpec{FirstLayer: 2, Layers: 3, KVHeads: 2, HeadDim: 8, MaxLen: 100}
	if err := s.Check(); err != nil {
		t.Errorf("valid spec: %v", err)
	}
	for _, bad := range []KVSpec{{FirstLayer: -1, Layers: 1, KVHeads: 1, HeadDim: 1, MaxLen: 1}, {Layers: 0, KVHeads: 1, HeadDim: 1, MaxLen: 1}, {Layers: 1, KVHeads: 1, HeadDim: 1}} {
		if bad.Check() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if s.Index(2) != 0 || s.Index(4) != 2 {
		t.Errorf("Index(2), Index(4) = %d, %d", s.Index(2), s.Index(4))
	}
	for _, l := range []int{1, 5} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Index(%d) did not panic", l)
				}
			}()
			s.Index(l)
		}()
	}
	for _, c := range []struct {
		lens     []int
		from, to int
		err      string
	}{
		{[]int{10, 10, 10}, 0, 10, ""},
		{[]int{10, 10, 10}, 4, 4, ""},
		{[]int{10, 9, 10}, 0, 10, "layer 3 holds 9"},
		{[]int{10, 10, 10}, 5, 4, "invalid range"},
		{[]int{10, 10, 10}, -1, 4, "invalid range"},
	} {
		err := s.CheckReadKV(c.lens, c.from, c.to)
		if (c.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("CheckReadKV(%v, %d, %d) = %v, want %q", c.lens, c.from, c.to, err, c.err)
		}
	}
	for _, c := range []struct {
		lens      []int
		size      int
		n, offset int
		err       string
	}{
		{[]int{4, 4, 4}, 96, 3, 4, ""},
		{[]int{4, 4, 4}, 0, 0, 0, "not a whole number"},
		{[]int{4, 4, 4}, 95, 0, 0, "not a whole number"},
		{[]int{4, 5, 4}, 32, 0, 0, "layer 2 holds 4 positions, layer 3 5"},
		{[]int{98, 98, 98}, 96, 0, 0, "exceed the cache's 100"},
	} {
		n, off, err := s.CheckAppendKV(c.lens, c.size, 32)
		if n != c.n || off != c.offset || (c.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("CheckAppendKV(%v, %d) = %d, %d, %v; want %d, %d, %q", c.lens, c.size, n, off, err, c.n, c.offset, c.err)
		}
	}
}
