package safetensors

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"

	"fusion/engine/tensor"
)

// File is an opened safetensors file. Its tensors are views into one buffer
// that lives until Close; with LoadMmap that buffer is read-only memory and
// writing to a tensor's Data faults. A File is safe for concurrent reads.
type File struct {
	name      string
	mode      LoadMode
	size      int64
	buf       []byte
	mapped    bool
	tensors   []tensor.Tensor // header order
	index     map[string]int
	metadata  map[string]string
	dataBytes int64
}

// Open reads or maps the file at path (mode LoadDefault means
// DefaultLoadMode) and validates its header before exposing any tensor.
func Open(path string, mode LoadMode) (*File, error) {
	mode = mode.Resolve()
	if mode != LoadRead && mode != LoadMmap {
		return nil, fmt.Errorf("safetensors: %s: invalid load mode %v", path, mode)
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("safetensors: %s: not a regular file", path)
	}
	size := st.Size()
	if size > math.MaxInt {
		return nil, fmt.Errorf("safetensors: %s: %d bytes do not fit in memory", path, size)
	}
	if mode == LoadMmap {
		return openMapped(path, fh, size)
	}
	return openRead(path, fh, size)
}

// openRead validates the header, then reads the rest of the file straight
// into its final buffer: the weight bytes are read once and never copied.
func openRead(path string, fh *os.File, size int64) (*File, error) {
	var prefix [8]byte
	if size >= 8 {
		if _, err := io.ReadFull(fh, prefix[:]); err != nil {
			return nil, fmt.Errorf("safetensors: %s: %w", path, err)
		}
	}
	n, err := headerLength(path, prefix[:], size)
	if err != nil {
		return nil, err
	}
	// n is now known to be at most MaxHeaderSize and within the file.
	buf := make([]byte, size)
	copy(buf, prefix[:])
	if _, err := io.ReadFull(fh, buf[8:]); err != nil {
		return nil, fmt.Errorf("safetensors: %s: reading %d bytes: %w", path, size, err)
	}
	f, err := newFile(path, buf, n)
	if err != nil {
		return nil, err
	}
	f.mode = LoadRead
	return f, nil
}

func openMapped(path string, fh *os.File, size int64) (*File, error) {
	if size < 8 {
		return nil, formatErr(path, "", ErrTruncated, "%d bytes, shorter than the 8-byte header length", size)
	}
	buf, err := mmapFile(fh, size)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %s: mmap: %w", path, err)
	}
	n, err := headerLength(path, buf, size)
	if err == nil {
		var f *File
		f, err = newFile(path, buf, n)
		if err == nil {
			f.mode, f.mapped = LoadMmap, true
			return f, nil
		}
	}
	return nil, errors.Join(err, munmap(buf))
}

// FromBytes validates data as a whole safetensors file and returns a File
// whose tensors are views into data (which the caller must not modify
// while they are in use). name appears in errors.
func FromBytes(name string, data []byte) (*File, error) {
	n, err := headerLength(name, data, int64(len(data)))
	if err != nil {
		return nil, err
	}
	return newFile(name, data, n)
}

// newFile parses the n-byte header at buf[8:] and builds the tensor views.
func newFile(name string, buf []byte, n int64) (*File, error) {
	h, err := parseHeader(name, buf[8:8+n], int64(len(buf)))
	if err != nil {
		return nil, err
	}
	f := &File{
		name:     name,
		size:     int64(len(buf)),
		buf:      buf,
		tensors:  make([]tensor.Tensor, len(h.entries)),
		index:    make(map[string]int, len(h.entries)),
		metadata: h.metadata,
	}
	for i, e := range h.entries {
		lo, hi := h.dataStart+e.begin, h.dataStart+e.end
		f.tensors[i] = tensor.Tensor{Name: e.name, DType: e.dtype, Shape: e.shape, Data: buf[lo:hi:hi]}
		f.index[e.name] = i
		f.dataBytes += e.end - e.begin
	}
	return f, nil
}

// Name returns the path (or name) the file was opened with.
func (f *File) Name() string { return f.name }

// Mode returns how the file was loaded (LoadRead, LoadMmap, or LoadDefault
// for FromBytes).
func (f *File) Mode() LoadMode { return f.mode }

// Size is the size of the whole file in bytes.
func (f *File) Size() int64 { return f.size }

// DataBytes is the sum of the tensors' byte sizes.
func (f *File) DataBytes() int64 { return f.dataBytes }

// Len is the number of tensors.
func (f *File) Len() int { return len(f.tensors) }

// Tensor returns the named tensor. The shape is the caller's copy; Data
// aliases the file buffer.
func (f *File) Tensor(name string) (tensor.Tensor, bool) {
	i, ok := f.index[name]
	if !ok {
		return tensor.Tensor{}, false
	}
	t := f.tensors[i]
	t.Shape = slices.Clone(t.Shape)
	return t, true
}

// Tensors returns every tensor in header order (shapes copied, Data
// aliasing the file buffer).
func (f *File) Tensors() []tensor.Tensor {
	out := make([]tensor.Tensor, len(f.tensors))
	for i, t := range f.tensors {
		t.Shape = slices.Clone(t.Shape)
		out[i] = t
	}
	return out
}

// Names returns the tensor names, sorted.
func (f *File) Names() []string {
	names := make([]string, 0, len(f.tensors))
	for _, t := range f.tensors {
		names = append(names, t.Name)
	}
	sort.Strings(names)
	return names
}

// Metadata returns a copy of the "__metadata__" map (nil if absent).
func (f *File) Metadata() map[string]string {
	if f.metadata == nil {
		return nil
	}
	out := make(map[string]string, len(f.metadata))
	for k, v := range f.metadata {
		out[k] = v
	}
	return out
}

// Close releases the buffer (unmapping it for LoadMmap). Tensors obtained
// from f must not be used afterwards. Close is idempotent.
func (f *File) Close() error {
	buf, mapped := f.buf, f.mapped
	f.buf, f.mapped, f.tensors, f.index = nil, false, nil, nil
	if mapped && buf != nil {
		if err := munmap(buf); err != nil {
			return fmt.Errorf("safetensors: %s: munmap: %w", f.name, err)
		}
	}
	return nil
}
