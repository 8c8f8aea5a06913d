package jsonkind

import "testing"

func TestOf(t *testing.T) {
	for doc, want := range map[string]string{
		` {"a":1}`: "an object", `[1]`: "an array", `"x"`: "a string", `true`: "a boolean",
		`false`: "a boolean", `null`: "null", `-1.5`: "a number", `  `: "empty",
	} {
		if got := Of([]byte(doc)); got != want {
			t.Errorf("Of(%q) = %q, want %q", doc, got, want)
		}
	}
	for in, want := range map[string]string{"number 1.5": "the number 1.5", "bool": "a boolean", "object": "an object", "weird": "weird"} {
		if got := Described(in); got != want {
			t.Errorf("Described(%q) = %q, want %q", in, got, want)
		}
	}
}
