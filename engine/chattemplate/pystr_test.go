package chattemplate

import "testing"

func TestPyStrRepr(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", `'plain'`},
		{"it's", `"it's"`},
		{`say "x"`, `'say "x"'`},
		{`both ' "`, `'both \' "'`},
		{"tab\tnl\ncr\r", `'tab\tnl\ncr\r'`},
		{"back\\slash", `'back\\slash'`},
		{"\x00\x1f\x7f", `'\x00\x1f\x7f'`},
		{"\u00a0\u00e9\u2028\u200b\U0001F600", `'\xa0é\u2028\u200b😀'`},
	}
	for _, tt := range tests {
		if got := pyStrRepr(tt.in); got != tt.want {
			t.Errorf("pyStrRepr(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestPyStr(t *testing.T) {
	tests := []struct {
		in   any
		want string
	}{
		{nil, "None"},
		{true, "True"},
		{int64(-3), "-3"},
		{2.0, "2.0"},
		{"s", "s"},
		{[]any{"a", int64(1), nil, []any{}}, "['a', 1, None, []]"},
		{NewObject("b", "x", "a", NewObject()), "{'b': 'x', 'a': {}}"},
	}
	for _, tt := range tests {
		v, err := toValue(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := pyStr(v); got != tt.want {
			t.Errorf("pyStr(%#v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
