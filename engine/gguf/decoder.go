package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// decoder reads little-endian GGUF primitives from an in-memory header,
// never past its end. Its first error sticks: later reads return zero
// values, and err reports what went wrong and where.
type decoder struct {
	buf    []byte
	off    int
	limit  int // reads beyond this offset fail (the header cap)
	err    error
	nested int // nested-array elements decoded so far
}

func newDecoder(buf []byte) *decoder {
	limit := len(buf)
	if limit > maxHeaderBytes {
		limit = maxHeaderBytes
	}
	return &decoder{buf: buf, limit: limit}
}

// failf records the first error, wrapping ErrInvalid.
func (d *decoder) failf(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: at byte %d: %s", ErrInvalid, d.off, fmt.Sprintf(format, args...))
	}
}

// remaining is the number of bytes that may still be read.
func (d *decoder) remaining() int {
	if d.err != nil {
		return 0
	}
	return d.limit - d.off
}

// take returns the next n bytes, or nil after recording an error.
func (d *decoder) take(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > d.remaining() {
		if d.limit < len(d.buf) && d.off+n > d.limit {
			d.failf("%s: header larger than %d bytes", what, maxHeaderBytes)
		} else {
			d.failf("%s: need %d bytes, %d left (truncated file?)", what, n, d.remaining())
		}
		return nil
	}
	b := d.buf[d.off : d.off+n]
	d.off += n
	return b
}

func (d *decoder) u8(what string) uint8 {
	if b := d.take(1, what); b != nil {
		return b[0]
	}
	return 0
}

func (d *decoder) u16(what string) uint16 {
	if b := d.take(2, what); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (d *decoder) u32(what string) uint32 {
	if b := d.take(4, what); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) u64(what string) uint64 {
	if b := d.take(8, what); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// count reads a uint64 element count and checks it against max and
// against the bytes left, given that each element takes at least minSize
// bytes. It returns -1 after recording an error.
func (d *decoder) count(what string, max, minSize int) int {
	start := d.off
	n := d.u64(what)
	if d.err != nil {
		return -1
	}
	if n > uint64(max) {
		d.off = start
		d.failf("%s %d exceeds the limit of %d", what, n, max)
		return -1
	}
	if minSize > 0 && n > uint64(d.remaining()/minSize) {
		d.off = start
		d.failf("%s %d cannot fit in the %d bytes left", what, n, d.remaining())
		return -1
	}
	return int(n)
}

// str reads a GGUF string (uint64 length, then bytes).
func (d *decoder) str(what string, max int) string {
	n := d.count(what+" length", max, 1)
	if n < 0 {
		return ""
	}
	return string(d.take(n, what))
}

// value reads a metadata value of type t; depth counts array nesting.
func (d *decoder) value(t ValueType, depth int) Value {
	switch t {
	case TypeUint8:
		return Of(d.u8("uint8"))
	case TypeInt8:
		return Of(int8(d.u8("int8")))
	case TypeUint16:
		return Of(d.u16("uint16"))
	case TypeInt16:
		return Of(int16(d.u16("int16")))
	case TypeUint32:
		return Of(d.u32("uint32"))
	case TypeInt32:
		return Of(int32(d.u32("int32")))
	case TypeFloat32:
		return Of(math.Float32frombits(d.u32("float32")))
	case TypeUint64:
		return Of(d.u64("uint64"))
	case TypeInt64:
		return Of(int64(d.u64("int64")))
	case TypeFloat64:
		return Of(math.Float64frombits(d.u64("float64")))
	case TypeBool:
		return Of(d.boolean())
	case TypeString:
		return Of(d.str("string", maxStringLen))
	case TypeArray:
		return d.array(depth + 1)
	}
	d.failf("unknown value type %d", uint32(t))
	return Value{}
}

func (d *decoder) boolean() bool {
	b := d.u8("bool")
	if b > 1 {
		d.off--
		d.failf("bool byte is %d, not 0 or 1", b)
	}
	return b == 1
}

// array reads an array's element type, count and elements.
func (d *decoder) array(depth int) Value {
	if depth > maxNesting {
		d.failf("arrays nested deeper than %d", maxNesting)
		return Value{}
	}
	et := ValueType(d.u32("array element type"))
	if d.err != nil {
		return Value{}
	}
	if !et.valid() {
		d.off -= 4
		d.failf("unknown array element type %d", uint32(et))
		return Value{}
	}
	minSize := et.scalarSize()
	switch et {
	case TypeString:
		minSize = 8
	case TypeArray:
		minSize = 12
	}
	n := d.count("array length", maxArrayLen, minSize)
	if n < 0 {
		return Value{}
	}
	switch et {
	case TypeUint8:
		return Array(readScalars(d, n, func(b []byte) uint8 { return b[0] }))
	case TypeInt8:
		return Array(readScalars(d, n, func(b []byte) int8 { return int8(b[0]) }))
	case TypeUint16:
		return Array(readScalars(d, n, binary.LittleEndian.Uint16))
	case TypeInt16:
		return Array(readScalars(d, n, func(b []byte) int16 { return int16(binary.LittleEndian.Uint16(b)) }))
	case TypeUint32:
		return Array(readScalars(d, n, binary.LittleEndian.Uint32))
	case TypeInt32:
		return Array(readScalars(d, n, func(b []byte) int32 { return int32(binary.LittleEndian.Uint32(b)) }))
	case TypeFloat32:
		return Array(readScalars(d, n, func(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }))
	case TypeUint64:
		return Array(readScalars(d, n, binary.LittleEndian.Uint64))
	case TypeInt64:
		return Array(readScalars(d, n, func(b []byte) int64 { return int64(binary.LittleEndian.Uint64(b)) }))
	case TypeFloat64:
		return Array(readScalars(d, n, func(b []byte) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b)) }))
	case TypeBool:
		out := make([]bool, n)
		for i := range out {
			out[i] = d.boolean()
		}
		return Array(out)
	case TypeString:
		out := make([]string, n)
		for i := range out {
			out[i] = d.str("string", maxStringLen)
			if d.err != nil {
				return Value{}
			}
		}
		return Array(out)
	}
	// Array of arrays.
	d.nested += n
	if d.nested > maxNestedValues {
		d.failf("more than %d nested array elements", maxNestedValues)
		return Value{}
	}
	out := make([]Value, n)
	for i := range out {
		out[i] = d.value(TypeArray, depth)
		if d.err != nil {
			return Value{}
		}
	}
	return Value{typ: TypeArray, elem: TypeArray, x: out, set: true}
}

// readScalars decodes n fixed-size elements; the caller has checked that
// they fit.
func readScalars[T any](d *decoder, n int, conv func([]byte) T) []T {
	var zero T
	size := scalarSizeOf(any(zero))
	raw := d.take(n*size, "array")
	if raw == nil {
		return nil
	}
	out := make([]T, n)
	for i := range out {
		out[i] = conv(raw[i*size:])
	}
	return out
}

func scalarSizeOf(x any) int {
	switch x.(type) {
	case uint8, int8:
		return 1
	case uint16, int16:
		return 2
	case uint32, int32, float32:
		return 4
	}
	return 8
}
