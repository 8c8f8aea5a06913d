package chattemplate

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

func TestDecodeJSONKeepsOrderAndNumberKinds(t *testing.T) {
	doc := `{"zeta": 1, "alpha": {"y": 2.0, "x": [1, 1.5, 1e2, -0, 9223372036854775808, null, true, "é"]}, "zeta": 3, "mid": {}}`
	v, err := DecodeJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	obj := v.(*Object)
	if got, want := obj.Keys(), []string{"zeta", "alpha", "mid"}; !reflect.DeepEqual(got, want) {
		t.Errorf("keys = %v, want %v (a repeated key keeps its first position)", got, want)
	}
	if z, _ := obj.Get("zeta"); z != int64(3) {
		t.Errorf("zeta = %#v, want int64(3) (the last value)", z)
	}
	alpha, _ := obj.Get("alpha")
	if got := alpha.(*Object).Keys(); !reflect.DeepEqual(got, []string{"y", "x"}) {
		t.Errorf("nested keys = %v", got)
	}
	x, _ := alpha.(*Object).Get("x")
	want := []any{int64(1), 1.5, 100.0, int64(0), 9223372036854775808.0, nil, true, "é"}
	if !reflect.DeepEqual(x, want) {
		t.Errorf("x = %#v, want %#v", x, want)
	}
	y, _ := alpha.(*Object).Get("y")
	if y != 2.0 {
		t.Errorf("y = %#v, want float64(2)", y)
	}
}

func TestDecodeJSONErrors(t *testing.T) {
	for _, doc := range []string{``, `{`, `{"a": 1} {}`, `[1,]`, `{"a" 1}`} {
		if _, err := DecodeJSON([]byte(doc)); err == nil {
			t.Errorf("DecodeJSON(%q) succeeded", doc)
		}
	}
	if v, err := DecodeJSON([]byte(`1e400`)); err != nil || !math.IsInf(v.(float64), 1) {
		t.Errorf("1e400 = %v, %v; want +Inf as Python reads it", v, err)
	}
}

func TestObjectJSONRoundTrip(t *testing.T) {
	var o Object
	in := `{"b":1.0,"a":[2,{"d":null,"c":"x\u2028"}],"e":-0.0,"f":1e+16}`
	if err := json.Unmarshal([]byte(in), &o); err != nil {
		t.Fatal(err)
	}
	// MarshalJSON itself: json.Marshal would re-escape U+2028 and <>&.
	out, err := o.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\"b\":1.0,\"a\":[2,{\"d\":null,\"c\":\"x\u2028\"}],\"e\":-0.0,\"f\":1e+16}"; string(out) != want {
		t.Errorf("round trip = %s, want %s", out, want)
	}
	var notObject Object
	if err := json.Unmarshal([]byte(`[1]`), &notObject); err == nil {
		t.Error("an array unmarshalled into an Object")
	}
}

func TestObjectSetGetDelete(t *testing.T) {
	o := NewObject("role", "user", "content", "hi")
	o.Set("name", "bob").Set("role", "assistant")
	o.Delete("content")
	o.Delete("absent")
	if got, want := o.Keys(), []string{"role", "name"}; !reflect.DeepEqual(got, want) {
		t.Errorf("keys = %v, want %v", got, want)
	}
	if r, ok := o.Get("role"); !ok || r != "assistant" || o.Len() != 2 {
		t.Errorf("role = %v, %v; len %d", r, ok, o.Len())
	}
	var nilObj *Object
	if _, ok := nilObj.Get("x"); ok || nilObj.Len() != 0 || nilObj.Keys() != nil {
		t.Error("nil *Object is not empty")
	}
}

func TestToValueGoTypes(t *testing.T) {
	type named map[string]any
	in := NewObject(
		"ints", []int32{1, -2},
		"uint", uint8(7),
		"f32", float32(0.5),
		"map", named{"b": 1, "a": "x"},
		"strs", []string{"p", "q"},
		"raw", json.RawMessage(`{"z": 1, "y": [true]}`),
		"num", json.Number("12"),
		"nilmap", map[string]any(nil),
	)
	got := mustRender(t, `{{ v | tojson }}`, Input{Extra: map[string]any{"v": in}})
	want := `{"ints": [1, -2], "uint": 7, "f32": 0.5, "map": {"a": "x", "b": 1}, "strs": ["p", "q"], "raw": {"z": 1, "y": [true]}, "num": 12, "nilmap": null}`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
