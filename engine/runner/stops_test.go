package runner

import (
	"strings"
	"testing"
)

func TestStopMatcher(t *testing.T) {
	tests := []struct {
		name    string
		stops   []string
		chunks  []string
		want    string // released text in total
		matched string
	}{
		{"no stops", nil, []string{"a", "b"}, "ab", ""},
		{"stop inside a chunk", []string{"END"}, []string{"helloENDworld"}, "hello", "END"},
		{"stop across chunks", []string{"END"}, []string{"hel", "loE", "N", "Dx"}, "hello", "END"},
		{"false start released", []string{"END"}, []string{"EN", "x", "y"}, "ENxy", ""},
		{"earliest of several", []string{"bb", "a"}, []string{"xxbba"}, "xx", "bb"},
		{"multibyte", []string{"。"}, []string{"你好", "。再见"}, "你好", "。"},
		{"empty stop ignored", []string{""}, []string{"abc"}, "abc", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newStopMatcher(tc.stops)
			var got strings.Builder
			matched := ""
			for _, c := range tc.chunks {
				out, s := m.Add(c)
				got.WriteString(out)
				if s != "" {
					matched = s
					break
				}
			}
			if matched == "" {
				got.WriteString(m.Flush())
			}
			if got.String() != tc.want || matched != tc.matched {
				t.Errorf("released %q matched %q; want %q, %q", got.String(), matched, tc.want, tc.matched)
			}
		})
	}
}

// Held-back text is never a released prefix of a stop string.
func TestStopMatcherHoldsPartialStop(t *testing.T) {
	m := newStopMatcher([]string{"<|end|>"})
	if out, _ := m.Add("hi <|en"); out != "hi " {
		t.Fatalf("released %q, want %q", out, "hi ")
	}
	if out, s := m.Add("d|> tail"); out != "" || s != "<|end|>" {
		t.Fatalf("released %q matched %q", out, s)
	}
}
