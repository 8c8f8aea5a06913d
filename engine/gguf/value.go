package gguf

import (
	"fmt"
	"math"
	"strconv"
)

// ValueType is the type tag of a metadata value, as stored in the file.
type ValueType uint32

// Metadata value types (gguf_type in ggml).
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{
	TypeUint8: "uint8", TypeInt8: "int8", TypeUint16: "uint16", TypeInt16: "int16",
	TypeUint32: "uint32", TypeInt32: "int32", TypeFloat32: "float32", TypeBool: "bool",
	TypeString: "string", TypeArray: "array", TypeUint64: "uint64", TypeInt64: "int64",
	TypeFloat64: "float64",
}

func (t ValueType) valid() bool { return int(t) < len(valueTypeNames) }

func (t ValueType) String() string {
	if t.valid() {
		return valueTypeNames[t]
	}
	return "type(" + strconv.FormatUint(uint64(t), 10) + ")"
}

// scalarSize is the encoded size of a fixed-size scalar, 0 for strings and
// arrays.
func (t ValueType) scalarSize() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// KV is one metadata entry. Files keep their entries in order, and so does
// the writer.
type KV struct {
	Key   string
	Value Value
}

// Value is a typed metadata value. The zero Value is "absent": its
// accessors report false.
//
// Scalars hold the Go type of their tag (uint8 … float64, bool, string);
// arrays of scalars hold a slice of it ([]uint32, []string, …); arrays of
// arrays hold []Value whose elements are arrays themselves.
type Value struct {
	typ  ValueType
	elem ValueType // element type of an array
	x    any
	set  bool
}

// Scalar is the set of Go types a metadata scalar or array element can have.
type Scalar interface {
	uint8 | int8 | uint16 | int16 | uint32 | int32 | float32 | bool | string | uint64 | int64 | float64
}

func scalarType(x any) ValueType {
	switch x.(type) {
	case uint8, []uint8:
		return TypeUint8
	case int8, []int8:
		return TypeInt8
	case uint16, []uint16:
		return TypeUint16
	case int16, []int16:
		return TypeInt16
	case uint32, []uint32:
		return TypeUint32
	case int32, []int32:
		return TypeInt32
	case float32, []float32:
		return TypeFloat32
	case bool, []bool:
		return TypeBool
	case string, []string:
		return TypeString
	case uint64, []uint64:
		return TypeUint64
	case int64, []int64:
		return TypeInt64
	case float64, []float64:
		return TypeFloat64
	}
	panic(fmt.Sprintf("gguf: %T is not a metadata scalar", x))
}

// Of returns a scalar Value of the type matching v's Go type.
func Of[T Scalar](v T) Value {
	return Value{typ: scalarType(any(v)), x: v, set: true}
}

// Array returns an array Value of scalars. The slice is kept, not copied.
func Array[T Scalar](v []T) Value {
	if v == nil {
		v = []T{}
	}
	return Value{typ: TypeArray, elem: scalarType(any(v)), x: v, set: true}
}

// ArrayOfArrays returns an array whose elements are themselves arrays. The
// GGUF format allows nesting and the gguf Python package writes it, but
// llama.cpp's reader refuses it: keep it out of files meant for llama.cpp.
// It fails if an element is not an array.
func ArrayOfArrays(v []Value) (Value, error) {
	for i, e := range v {
		if e.typ != TypeArray || !e.set {
			return Value{}, fmt.Errorf("gguf: element %d of a nested array is %s, not an array", i, e.Type())
		}
	}
	if v == nil {
		v = []Value{}
	}
	return Value{typ: TypeArray, elem: TypeArray, x: v, set: true}, nil
}

// Convenience constructors for the scalar types used by the standard keys.

// String returns a string Value.
func String(s string) Value { return Of(s) }

// Uint32 returns a uint32 Value.
func Uint32(v uint32) Value { return Of(v) }

// Int32 returns an int32 Value.
func Int32(v int32) Value { return Of(v) }

// Uint64 returns a uint64 Value.
func Uint64(v uint64) Value { return Of(v) }

// Float32 returns a float32 Value.
func Float32(v float32) Value { return Of(v) }

// Bool returns a bool Value.
func Bool(v bool) Value { return Of(v) }

// Valid reports whether v holds a value (the zero Value does not).
func (v Value) Valid() bool { return v.set }

// Type returns the value's type tag; TypeArray for arrays.
func (v Value) Type() ValueType { return v.typ }

// ElemType returns the element type of an array.
func (v Value) ElemType() ValueType { return v.elem }

// Len returns the number of elements of an array, 0 for scalars.
func (v Value) Len() int {
	if v.typ != TypeArray || !v.set {
		return 0
	}
	switch a := v.x.(type) {
	case []uint8:
		return len(a)
	case []int8:
		return len(a)
	case []uint16:
		return len(a)
	case []int16:
		return len(a)
	case []uint32:
		return len(a)
	case []int32:
		return len(a)
	case []float32:
		return len(a)
	case []bool:
		return len(a)
	case []string:
		return len(a)
	case []uint64:
		return len(a)
	case []int64:
		return len(a)
	case []float64:
		return len(a)
	case []Value:
		return len(a)
	}
	return 0
}

// Any returns the underlying Go value (see Value).
func (v Value) Any() any { return v.x }

// AsString returns a string scalar.
func (v Value) AsString() (string, bool) {
	s, ok := v.x.(string)
	return s, ok && v.typ == TypeString
}

// AsBool returns a bool scalar.
func (v Value) AsBool() (bool, bool) {
	b, ok := v.x.(bool)
	return b, ok && v.typ == TypeBool
}

// AsInt64 returns an integer scalar of any width and signedness that fits
// in int64.
func (v Value) AsInt64() (int64, bool) {
	if v.typ == TypeArray {
		return 0, false
	}
	return toInt64(v.x)
}

// AsFloat64 returns a float32 or float64 scalar. A float32 is converted to
// the float64 nearest its shortest decimal form, so 1e-6 stored as float32
// reads back as 1e-06 (what config.json would say), not 9.99999997e-07.
func (v Value) AsFloat64() (float64, bool) {
	switch x := v.x.(type) {
	case float32:
		f, err := strconv.ParseFloat(strconv.FormatFloat(float64(x), 'g', -1, 32), 64)
		if err != nil { // ±Inf and NaN
			return float64(x), true
		}
		return f, true
	case float64:
		return x, true
	}
	return 0, false
}

// AsStrings returns an array of strings.
func (v Value) AsStrings() ([]string, bool) {
	s, ok := v.x.([]string)
	return s, ok
}

// AsFloat32s returns an array of float32.
func (v Value) AsFloat32s() ([]float32, bool) {
	s, ok := v.x.([]float32)
	return s, ok
}

// AsInt64s returns an array of integers of any width, widened to int64.
func (v Value) AsInt64s() ([]int64, bool) {
	if v.typ != TypeArray {
		return nil, false
	}
	n := v.Len()
	switch v.elem {
	case TypeUint8, TypeInt8, TypeUint16, TypeInt16, TypeUint32, TypeInt32, TypeUint64, TypeInt64:
	default:
		return nil, false
	}
	out := make([]int64, n)
	for i := range n {
		x, ok := toInt64(elemAt(v.x, i))
		if !ok {
			return nil, false
		}
		out[i] = x
	}
	return out, true
}

// AsArrays returns the elements of an array of arrays.
func (v Value) AsArrays() ([]Value, bool) {
	s, ok := v.x.([]Value)
	return s, ok
}

func toInt64(x any) (int64, bool) {
	switch n := x.(type) {
	case uint8:
		return int64(n), true
	case int8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case int16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint64:
		if n > math.MaxInt64 {
			return 0, false
		}
		return int64(n), true
	}
	return 0, false
}

func elemAt(a any, i int) any {
	switch s := a.(type) {
	case []uint8:
		return s[i]
	case []int8:
		return s[i]
	case []uint16:
		return s[i]
	case []int16:
		return s[i]
	case []uint32:
		return s[i]
	case []int32:
		return s[i]
	case []uint64:
		return s[i]
	case []int64:
		return s[i]
	}
	return nil
}

// String formats v for diagnostics; long arrays are summarised.
func (v Value) String() string {
	if !v.set {
		return "<absent>"
	}
	if v.typ == TypeArray {
		n := v.Len()
		if n > 8 {
			return fmt.Sprintf("[%s × %d]", v.elem, n)
		}
		return fmt.Sprintf("%v", v.x)
	}
	if s, ok := v.x.(string); ok {
		if len(s) > 64 {
			return strconv.Quote(s[:64]) + "…"
		}
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%v", v.x)
}
