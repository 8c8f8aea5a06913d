package chattemplate

import "testing"

func TestPreprocess(t *testing.T) {
	filters := map[string]bool{"tojson": true, "trim": true, "str": true}
	tests := []struct {
		name, in, want string
	}{
		{"text untouched", "a | tojson {x}", "a | tojson {x}"},
		{"output wrapped", "{{ x }}", "{{ ( x ) | fusion_str }}"},
		{"markers kept", "{{- x | tojson(indent=4) -}}", "{{- ( x | fusion_tojson(indent=4) ) | fusion_str -}}"},
		{"statement filters", "{% set y = x|trim %}", "{% set y = x|fusion_trim %}"},
		{"other filters kept", "{% if x | length > 0 %}", "{% if x | length > 0 %}"},
		{"not after pipe", "{% set tojson = 1 %}", "{% set tojson = 1 %}"},
		{"strings untouched", `{% set s = "a | tojson }}" %}`, `{% set s = "a | tojson }}" %}`},
		{"comment untouched", "{# x | tojson #}", "{# x | tojson #}"},
		{"raw untouched", "{% raw %}{{ x | tojson }}{% endraw %}{{ y }}", "{% raw %}{{ x | tojson }}{% endraw %}{{ ( y ) | fusion_str }}"},
		{"nested braces", "{{ {'a': {'b': 1}} }}", "{{ ( {'a': {'b': 1} } ) | fusion_str }}"},
		{"escapes decoded", `{% set s = '\u00e9\x41\r\'' %}`, "{% set s = 'éA\r\\'' %}"},
		{"unknown escape kept", `{% set s = "\d\\" %}`, `{% set s = "\\d\\" %}`},
		{"newlines normalised", "a\r\nb\rc\n", "a\nb\nc"},
		{"empty output kept", "{{ }}", "{{ }}"},
		{"unclosed kept", "{{ x", "{{ x"},
	}
	for _, tt := range tests {
		if got := preprocess(tt.in, filters); got != tt.want {
			t.Errorf("%s: preprocess(%q)\n got %q\nwant %q", tt.name, tt.in, got, tt.want)
		}
	}
}

func TestPyUnescape(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{`plain`, "plain", true},
		{`\n\t\r\a\b\f\v\\\'\"`, "\n\t\r\a\b\f\v\\'\"", true},
		{`\101\0\x41\u00e9\U0001F600`, "A\x00Aé😀", true},
		{"a\\\nb", "ab", true},
		{`\q`, `\q`, true},
		{`\x4`, "", false},
		{`\N{BULLET}`, "", false},
		{`tail\`, "", false},
	}
	for _, tt := range tests {
		got, ok := pyUnescape(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("pyUnescape(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
