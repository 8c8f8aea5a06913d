package gguf

import (
	"fmt"
	"math/bits"
	"sort"

	"fusion/engine/tensor"
)

// header is everything before the data section, validated.
type header struct {
	version   uint32
	kv        []KV
	tensors   []tensorInfo
	alignment int
	dataStart int
}

// tensorInfo is one tensor description as declared by the file.
type tensorInfo struct {
	name   string
	dims   []uint64 // innermost first, as stored
	typ    GGMLType
	dtype  tensor.DType
	shape  []int64 // outermost first
	offset uint64  // from the data section start
	size   int64   // bytes
}

// parseHeader decodes and validates the header of a GGUF file held in buf.
// It checks each tensor against len(buf) but does not slice any data.
func parseHeader(buf []byte) (*header, error) {
	d := newDecoder(buf)
	if m := d.take(4, "magic"); m == nil || string(m) != magic {
		if d.err == nil {
			return nil, fmt.Errorf("%w: bad magic %q (not a GGUF file)", ErrInvalid, m)
		}
		return nil, d.err
	}
	h := &header{version: d.u32("version")}
	if d.err != nil {
		return nil, d.err
	}
	switch {
	case h.version == 2 || h.version == 3:
	case h.version == 1:
		return nil, fmt.Errorf("%w: GGUF version 1 (32-bit counts) is obsolete", ErrUnsupported)
	case h.version&0xffff == 0 && (bits.ReverseBytes32(h.version) == 2 || bits.ReverseBytes32(h.version) == 3):
		return nil, fmt.Errorf("%w: big-endian GGUF", ErrUnsupported)
	default:
		return nil, fmt.Errorf("%w: unknown version %d", ErrInvalid, h.version)
	}

	// Minimum encoded sizes: a KV is a key length, a type and a one-byte
	// value; a tensor info is a name length, n_dims, a type and an offset.
	nTensors := d.count("tensor count", maxTensorCount, 8+4+4+8)
	nKV := d.count("metadata count", maxKVCount, 8+4+1)
	if d.err != nil {
		return nil, d.err
	}
	if err := h.readKV(d, nKV); err != nil {
		return nil, err
	}
	if err := h.readTensorInfos(d, nTensors); err != nil {
		return nil, err
	}
	h.dataStart = alignUp(d.off, h.alignment)
	if err := h.checkTensors(int64(len(buf))); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *header) readKV(d *decoder, n int) error {
	h.kv = make([]KV, 0, n)
	seen := make(map[string]bool, n)
	h.alignment = defaultAlignment
	for i := range n {
		start := d.off
		key := d.str("key", maxKeyLen)
		t := ValueType(d.u32("value type"))
		if d.err != nil {
			return fmt.Errorf("metadata %d: %w", i, d.err)
		}
		if key == "" {
			d.off = start
			d.failf("metadata %d has an empty key", i)
			return d.err
		}
		if seen[key] {
			d.off = start
			d.failf("duplicate metadata key %q", key)
			return d.err
		}
		seen[key] = true
		if !t.valid() {
			d.off -= 4
			d.failf("metadata %q has unknown value type %d", key, uint32(t))
			return d.err
		}
		v := d.value(t, 0)
		if d.err != nil {
			return fmt.Errorf("metadata %q: %w", key, d.err)
		}
		if key == KeyAlignment {
			a, ok := v.Any().(uint32)
			if !ok || v.Type() != TypeUint32 {
				return fmt.Errorf("%w: %s is %s, want uint32", ErrInvalid, KeyAlignment, v.Type())
			}
			if a == 0 || a&(a-1) != 0 || a > maxAlignment {
				return fmt.Errorf("%w: %s %d is not a power of two up to %d", ErrInvalid, KeyAlignment, a, maxAlignment)
			}
			h.alignment = int(a)
		}
		h.kv = append(h.kv, KV{Key: key, Value: v})
	}
	return nil
}

func (h *header) readTensorInfos(d *decoder, n int) error {
	h.tensors = make([]tensorInfo, 0, n)
	for i := range n {
		ti, err := readTensorInfo(d)
		if err != nil {
			return fmt.Errorf("tensor %d: %w", i, err)
		}
		h.tensors = append(h.tensors, ti)
	}
	return nil
}

func readTensorInfo(d *decoder) (tensorInfo, error) {
	var ti tensorInfo
	ti.name = d.str("tensor name", maxNameLen)
	nDims := d.u32("n_dims")
	if d.err != nil {
		return ti, d.err
	}
	if nDims > maxDims {
		d.off -= 4
		d.failf("tensor %q has %d dimensions, at most %d allowed", ti.name, nDims, maxDims)
		return ti, d.err
	}
	ti.dims = make([]uint64, nDims)
	for j := range ti.dims {
		ti.dims[j] = d.u64("dimension")
	}
	ti.typ = GGMLType(d.u32("tensor type"))
	ti.offset = d.u64("tensor offset")
	if d.err != nil {
		return ti, d.err
	}
	if ti.name == "" {
		return ti, fmt.Errorf("%w: empty tensor name", ErrInvalid)
	}
	dt, err := DTypeOf(ti.typ)
	if err != nil {
		return ti, fmt.Errorf("tensor %q: %w", ti.name, err)
	}
	ti.dtype = dt
	ti.shape = make([]int64, len(ti.dims))
	for j, dim := range ti.dims {
		if dim > 1<<62 {
			return ti, fmt.Errorf("%w: tensor %q dimension %d is %d", ErrInvalid, ti.name, j, dim)
		}
		ti.shape[len(ti.dims)-1-j] = int64(dim)
	}
	elems, err := tensor.NumElements(ti.shape)
	if err != nil {
		return ti, fmt.Errorf("%w: tensor %q: %v", ErrInvalid, ti.name, err)
	}
	if len(ti.dims) > 0 && ti.dims[0]%uint64(dt.BlockElems()) != 0 {
		return ti, fmt.Errorf("%w: tensor %q row of %d elements is not a multiple of the %v block size %d",
			ErrInvalid, ti.name, ti.dims[0], dt, dt.BlockElems())
	}
	ti.size, err = dt.ByteSize(elems)
	if err != nil {
		return ti, fmt.Errorf("%w: tensor %q: %v", ErrInvalid, ti.name, err)
	}
	return ti, nil
}

// checkTensors validates names, alignment, bounds and overlaps of the
// tensor data against a file of fileSize bytes.
func (h *header) checkTensors(fileSize int64) error {
	seen := make(map[string]bool, len(h.tensors))
	dataLen := fileSize - int64(h.dataStart)
	for _, ti := range h.tensors {
		if seen[ti.name] {
			return fmt.Errorf("%w: duplicate tensor name %q", ErrInvalid, ti.name)
		}
		seen[ti.name] = true
		if ti.offset%uint64(h.alignment) != 0 {
			return fmt.Errorf("%w: tensor %q offset %d is not a multiple of the alignment %d",
				ErrInvalid, ti.name, ti.offset, h.alignment)
		}
		if dataLen < 0 || ti.offset > uint64(dataLen) || uint64(ti.size) > uint64(dataLen)-ti.offset {
			return fmt.Errorf("%w: tensor %q data [%d, +%d) runs past the end of the file (data section is %d bytes)",
				ErrInvalid, ti.name, ti.offset, ti.size, max(dataLen, 0))
		}
	}
	order := make([]int, 0, len(h.tensors))
	for i, ti := range h.tensors {
		if ti.size > 0 {
			order = append(order, i)
		}
	}
	sort.Slice(order, func(a, b int) bool { return h.tensors[order[a]].offset < h.tensors[order[b]].offset })
	for k := 1; k < len(order); k++ {
		prev, cur := h.tensors[order[k-1]], h.tensors[order[k]]
		if prev.offset+uint64(prev.size) > cur.offset {
			return fmt.Errorf("%w: tensors %q and %q overlap", ErrInvalid, prev.name, cur.name)
		}
	}
	return nil
}

func alignUp(n, a int) int { return (n + a - 1) / a * a }

// tensorsFrom slices the tensor views out of buf.
func (h *header) tensorsFrom(buf []byte) []tensor.Tensor {
	out := make([]tensor.Tensor, len(h.tensors))
	for i, ti := range h.tensors {
		start := h.dataStart + int(ti.offset)
		end := start + int(ti.size)
		out[i] = tensor.Tensor{Name: ti.name, DType: ti.dtype, Shape: ti.shape, Data: buf[start:end:end]}
	}
	return out
}
