package rnnoise

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrNotRNNoise is wrapped when a blob or directory is not an RNNoise 0.2
// model this package can run.
var ErrNotRNNoise = errors.New("rnnoise: not a supported RNNoise model")

// Weight types of a blob record (nnet.h's WEIGHT_TYPE_*).
const (
	TypeFloat   = 0
	TypeInt     = 1
	TypeQWeight = 2
	TypeInt8    = 3
)

// headSize is the size of a record's header, and the block size its data
// is padded to (WEIGHT_BLOCK_SIZE).
const headSize = 64

// Array is one named array of a weight blob.
type Array struct {
	Name string
	Type int
	Data []byte // Size bytes, without the padding
}

// Floats returns the data of a TypeFloat array.
func (a Array) Floats() ([]float32, error) {
	if a.Type != TypeFloat || len(a.Data)%4 != 0 {
		return nil, fmt.Errorf("%w: %s is not float32 (type %d, %d bytes)", ErrNotRNNoise, a.Name, a.Type, len(a.Data))
	}
	out := make([]float32, len(a.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(a.Data[4*i:]))
	}
	return out, nil
}

// Ints returns the data of a TypeInt array.
func (a Array) Ints() ([]int32, error) {
	if a.Type != TypeInt || len(a.Data)%4 != 0 {
		return nil, fmt.Errorf("%w: %s is not int32 (type %d, %d bytes)", ErrNotRNNoise, a.Name, a.Type, len(a.Data))
	}
	out := make([]int32, len(a.Data)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(a.Data[4*i:]))
	}
	return out, nil
}

// ReadBlob parses a weight blob: records of a 64-byte header ("DNNw",
// version 0, type, size, size rounded up to 64 bytes, a NUL-terminated
// name of at most 43 bytes, all little-endian int32) and the data padded
// to the rounded size, as RNNoise's write_weights writes them and
// parse_weights reads them. It returns the arrays in file order.
func ReadBlob(b []byte) ([]Array, error) {
	var out []Array
	for off := 0; off < len(b); {
		if len(b)-off < headSize {
			return nil, fmt.Errorf("%w: %d trailing bytes at offset %d", ErrNotRNNoise, len(b)-off, off)
		}
		h := b[off : off+headSize]
		if string(h[:4]) != "DNNw" {
			return nil, fmt.Errorf("%w: no DNNw record at offset %d", ErrNotRNNoise, off)
		}
		version := int32(binary.LittleEndian.Uint32(h[4:]))
		typ := int32(binary.LittleEndian.Uint32(h[8:]))
		size := int32(binary.LittleEndian.Uint32(h[12:]))
		block := int32(binary.LittleEndian.Uint32(h[16:]))
		name, _, ok := bytes.Cut(h[20:], []byte{0})
		switch {
		case version != 0:
			return nil, fmt.Errorf("%w: record version %d at offset %d", ErrNotRNNoise, version, off)
		case !ok || len(name) == 0:
			return nil, fmt.Errorf("%w: unterminated or empty name at offset %d", ErrNotRNNoise, off)
		case typ < TypeFloat || typ > TypeInt8:
			return nil, fmt.Errorf("%w: %s has type %d", ErrNotRNNoise, name, typ)
		case size < 0 || block < size || block%headSize != 0 || int64(block) > int64(len(b)-off-headSize):
			return nil, fmt.Errorf("%w: %s has size %d in a block of %d (%d bytes left)", ErrNotRNNoise, name, size, block, len(b)-off-headSize)
		}
		data := b[off+headSize : off+headSize+int(size)]
		out = append(out, Array{Name: string(name), Type: int(typ), Data: data})
		off += headSize + int(block)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: empty blob", ErrNotRNNoise)
	}
	return out, nil
}
