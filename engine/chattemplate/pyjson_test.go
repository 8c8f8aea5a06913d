package chattemplate

import (
	"errors"
	"github.com/ardanlabs/jinja"
	"math"
	"testing"
)

func TestPyFloatRepr(t *testing.T) {
	tests := []struct {
		in   float64
		want string
	}{
		{1.0, "1.0"},
		{0.1, "0.1"},
		{100.0, "100.0"},
		{123.456, "123.456"},
		{1e15, "1000000000000000.0"},
		{9999999999999998.0, "9999999999999998.0"},
		{1e16, "1e+16"},
		{12345678901234567.0, "1.2345678901234568e+16"},
		{1e22, "1e+22"},
		{0.0001, "0.0001"},
		{0.00012345, "0.00012345"},
		{1e-05, "1e-05"},
		{1.5e-07, "1.5e-07"},
		{-2.5e-10, "-2.5e-10"},
		{math.Copysign(0, -1), "-0.0"},
		{5e-324, "5e-324"},
		{1.7976931348623157e+308, "1.7976931348623157e+308"},
	}
	for _, tt := range tests {
		if got := pyFloatRepr(tt.in); got != tt.want {
			t.Errorf("pyFloatRepr(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
	for in, want := range map[float64]string{math.NaN(): "NaN", math.Inf(1): "Infinity", math.Inf(-1): "-Infinity"} {
		if got := pyJSONFloat(in); got != want {
			t.Errorf("pyJSONFloat(%v) = %q, want %q", in, got, want)
		}
	}
}

// tojsonSample is {"name": ..., "描述": ..., "args": {...}, "emoji": ...}
// with keys out of alphabetical order, non-ASCII text, HTML characters,
// escapes, a float that must stay a float, and empty containers.
func tojsonSample() *Object {
	return NewObject(
		"name", "get_weather",
		"描述", "Zürich — “q” & <b>",
		"args", NewObject(
			"zeta", 1.0,
			"alpha", []any{int64(1), 2.5, nil, true, "a\"b\\c\n\u2028\x01\x7f"},
			"e", NewObject(),
			"l", []any{},
		),
		"emoji", "🎉",
	)
}

// The expected strings are Python's json.dumps output for the sample.
func TestToJSONFilter(t *testing.T) {
	tests := []struct {
		name   string
		kwargs map[string]any
		want   string
	}{
		{
			name: "default",
			want: `{"name": "get_weather", "描述": "Zürich — “q” & <b>", "args": {"zeta": 1.0, "alpha": [1, 2.5, null, true, "a\"b\\c\n` + "\u2028" + `\u0001` + "\x7f" + `"], "e": {}, "l": []}, "emoji": "🎉"}`,
		},
		{
			name:   "indent 2",
			kwargs: map[string]any{"indent": 2},
			want: "{\n" +
				"  \"name\": \"get_weather\",\n" +
				"  \"描述\": \"Zürich — “q” & <b>\",\n" +
				"  \"args\": {\n" +
				"    \"zeta\": 1.0,\n" +
				"    \"alpha\": [\n" +
				"      1,\n" +
				"      2.5,\n" +
				"      null,\n" +
				"      true,\n" +
				"      \"a\\\"b\\\\c\\n\u2028\\u0001\x7f\"\n" +
				"    ],\n" +
				"    \"e\": {},\n" +
				"    \"l\": []\n" +
				"  },\n" +
				"  \"emoji\": \"🎉\"\n" +
				"}",
		},
		{
			name:   "ensure_ascii",
			kwargs: map[string]any{"ensure_ascii": true},
			want:   `{"name": "get_weather", "\u63cf\u8ff0": "Z\u00fcrich \u2014 \u201cq\u201d & <b>", "args": {"zeta": 1.0, "alpha": [1, 2.5, null, true, "a\"b\\c\n\u2028\u0001\u007f"], "e": {}, "l": []}, "emoji": "\ud83c\udf89"}`,
		},
		{
			name:   "sort_keys and compact separators",
			kwargs: map[string]any{"sort_keys": true, "separators": []any{",", ":"}},
			want:   `{"args":{"alpha":[1,2.5,null,true,"a\"b\\c\n` + "\u2028" + `\u0001` + "\x7f" + `"],"e":{},"l":[],"zeta":1.0},"emoji":"🎉","name":"get_weather","描述":"Zürich — “q” & <b>"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := toValue(tojsonSample())
			if err != nil {
				t.Fatal(err)
			}
			kwargs, err := toValue(tt.kwargs)
			if err != nil {
				t.Fatal(err)
			}
			var kw map[string]jinja.Value
			if !kwargs.IsNone() {
				kw = kwargs.AsDict().Data
			}
			got, err := filterToJSON([]jinja.Value{v}, kw)
			if err != nil {
				t.Fatal(err)
			}
			if got.AsString() != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got.AsString(), tt.want)
			}
		})
	}
}

func TestToJSONInTemplate(t *testing.T) {
	tests := []struct {
		src  string
		want string
	}{
		{`{{ v.args | tojson(indent='\t') }}`, "{\n\t\"zeta\": 1.0,\n\t\"alpha\": [\n\t\t1,\n\t\t2.5,\n\t\tnull,\n\t\ttrue,\n\t\t\"a\\\"b\\\\c\\n\u2028\\u0001\x7f\"\n\t],\n\t\"e\": {},\n\t\"l\": []\n}"},
		{`{{ [1, [2, {}]] | tojson(indent=0) }}`, "[\n1,\n[\n2,\n{}\n]\n]"},
		{`{{ "<b>&'" | tojson }}`, `"<b>&'"`},
		{`{{ none | tojson }}|{{ true | tojson }}|{{ 3 | tojson }}|{{ 0.5 | tojson }}`, `null|true|3|0.5`},
	}
	for _, tt := range tests {
		if got := mustRender(t, tt.src, Input{Extra: map[string]any{"v": tojsonSample()}}); got != tt.want {
			t.Errorf("%s\n got %q\nwant %q", tt.src, got, tt.want)
		}
	}
}

func TestToJSONUndefinedFails(t *testing.T) {
	tmpl, err := New(`{{ missing | tojson }}`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(Input{})
	var te *TemplateError
	if !errors.As(err, &te) || te.Raised || te.Message != "Object of type Undefined is not JSON serializable" {
		t.Errorf("err = %#v, want a TemplateError about Undefined", err)
	}
}
