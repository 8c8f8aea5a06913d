package chattemplate

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"

	"github.com/ardanlabs/jinja"
)

// toValue converts a Go value into the engine's representation. Accepted:
// nil, bool, string, signed and unsigned integers, float32/64, json.Number,
// json.RawMessage, *Object, map[string]T (keys sorted: a Go map has no
// order), and slices or arrays of any accepted type. As in encoding/json,
// nil pointers, slices and maps are null (Python None).
func toValue(v any) (jinja.Value, error) {
	switch x := v.(type) {
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(x), nil
	case string:
		return jinja.NewString(x), nil
	case int:
		return jinja.NewInt(int64(x)), nil
	case int64:
		return jinja.NewInt(x), nil
	case float64:
		return jinja.NewFloat(x), nil
	case json.Number:
		n, err := parseNumber(string(x))
		if err != nil {
			return jinja.Undefined(), err
		}
		return toValue(n)
	case json.RawMessage:
		d, err := DecodeJSON(x)
		if err != nil {
			return jinja.Undefined(), err
		}
		return toValue(d)
	case *Object:
		if x == nil {
			return jinja.None(), nil
		}
		d := jinja.NewDict()
		dict := d.AsDict()
		for _, k := range x.keys {
			item, err := toValue(x.vals[k])
			if err != nil {
				return jinja.Undefined(), fmt.Errorf("%q: %w", k, err)
			}
			dict.Set(k, item)
		}
		return d, nil
	case []any:
		if x == nil {
			return jinja.None(), nil
		}
		items := make([]jinja.Value, len(x))
		for i, e := range x {
			item, err := toValue(e)
			if err != nil {
				return jinja.Undefined(), fmt.Errorf("[%d]: %w", i, err)
			}
			items[i] = item
		}
		return jinja.NewList(items), nil
	}
	return reflectValue(reflect.ValueOf(v))
}

// reflectValue handles the kinds the fast path in toValue does not name.
func reflectValue(rv reflect.Value) (jinja.Value, error) {
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return jinja.NewInt(rv.Int()), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		u := rv.Uint()
		if u > 1<<63-1 {
			return jinja.NewFloat(float64(u)), nil
		}
		return jinja.NewInt(int64(u)), nil
	case reflect.Float32, reflect.Float64:
		return jinja.NewFloat(rv.Float()), nil
	case reflect.Bool:
		return jinja.NewBool(rv.Bool()), nil
	case reflect.String:
		return jinja.NewString(rv.String()), nil
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return jinja.None(), nil
		}
		if rv.Kind() == reflect.Interface {
			return toValue(rv.Elem().Interface())
		}
	case reflect.Slice:
		if rv.IsNil() {
			return jinja.None(), nil
		}
		fallthrough
	case reflect.Array:
		items := make([]jinja.Value, rv.Len())
		for i := range items {
			item, err := toValue(rv.Index(i).Interface())
			if err != nil {
				return jinja.Undefined(), fmt.Errorf("[%d]: %w", i, err)
			}
			items[i] = item
		}
		return jinja.NewList(items), nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			break
		}
		if rv.IsNil() {
			return jinja.None(), nil
		}
		vals := make(map[string]any, rv.Len())
		keys := make([]string, 0, rv.Len())
		for it := rv.MapRange(); it.Next(); {
			k := it.Key().String()
			keys = append(keys, k)
			vals[k] = it.Value().Interface()
		}
		sort.Strings(keys)
		d := jinja.NewDict()
		dict := d.AsDict()
		for _, k := range keys {
			item, err := toValue(vals[k])
			if err != nil {
				return jinja.Undefined(), fmt.Errorf("%q: %w", k, err)
			}
			dict.Set(k, item)
		}
		return d, nil
	}
	if !rv.IsValid() {
		return jinja.None(), nil
	}
	return jinja.Undefined(), fmt.Errorf("unsupported value of type %s", rv.Type())
}
