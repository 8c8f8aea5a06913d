package gguf

import (
	"fmt"
	"io"
	"os"

	"fusion/engine/tensor"
)

// LoadMode says how Open brings a file's bytes into memory.
type LoadMode int

const (
	// LoadRead reads the whole file once into one heap buffer.
	LoadRead LoadMode = iota
	// LoadMmap maps the file read-only; tensor data must not be written.
	LoadMmap
)

// ParseLoadMode parses "read" or "mmap".
func ParseLoadMode(s string) (LoadMode, error) {
	switch s {
	case "read":
		return LoadRead, nil
	case "mmap":
		return LoadMmap, nil
	}
	return 0, fmt.Errorf("gguf: unknown load mode %q (want read or mmap)", s)
}

func (m LoadMode) String() string {
	if m == LoadMmap {
		return "mmap"
	}
	return "read"
}

// File is an opened GGUF file. Its tensors are views into one buffer that
// stays valid until Close.
type File struct {
	// Name is the path (or the name given to Parse) used in errors.
	Name string
	// Version is the GGUF version, 2 or 3.
	Version uint32
	// Alignment is the data alignment (general.alignment, default 32).
	Alignment int
	// KV is the metadata in file order.
	KV []KV
	// Tensors are in file order, Shape outermost-first.
	Tensors []tensor.Tensor
	// DataOffset is where the data section starts in the file.
	DataOffset int64

	buf     []byte
	offsets []int64 // absolute file offset of each tensor's data
	unmap   func() error
	kvIndex map[string]int
	tIndex  map[string]int
}

// Open reads and validates the GGUF file at path. Every error names the
// file.
func Open(path string, mode LoadMode) (*File, error) {
	buf, unmap, err := load(path, mode)
	if err != nil {
		return nil, fmt.Errorf("gguf: %s: %w", path, err)
	}
	f, err := Parse(path, buf)
	if err != nil {
		if unmap != nil {
			_ = unmap()
		}
		return nil, err
	}
	f.unmap = unmap
	return f, nil
}

// Parse validates a GGUF file held in data and returns views into it; data
// must not change while the File is used. name labels errors.
func Parse(name string, data []byte) (*File, error) {
	h, err := parseHeader(data)
	if err != nil {
		return nil, fmt.Errorf("gguf: %s: %w", name, err)
	}
	f := &File{
		Name:       name,
		Version:    h.version,
		Alignment:  h.alignment,
		KV:         h.kv,
		Tensors:    h.tensorsFrom(data),
		DataOffset: int64(h.dataStart),
		buf:        data,
		kvIndex:    make(map[string]int, len(h.kv)),
		tIndex:     make(map[string]int, len(h.tensors)),
	}
	for i, kv := range f.KV {
		f.kvIndex[kv.Key] = i
	}
	for i, t := range f.Tensors {
		f.tIndex[t.Name] = i
		f.offsets = append(f.offsets, int64(h.dataStart)+int64(h.tensors[i].offset))
	}
	return f, nil
}

func load(path string, mode LoadMode) ([]byte, func() error, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, nil, err
	}
	size := st.Size()
	if !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%w: not a regular file", ErrInvalid)
	}
	if size < 4 {
		return nil, nil, fmt.Errorf("%w: file is %d bytes", ErrInvalid, size)
	}
	if int64(int(size)) != size {
		return nil, nil, fmt.Errorf("%w: file of %d bytes does not fit in memory", ErrUnsupported, size)
	}
	if mode == LoadMmap {
		return mmapFile(fh, int(size))
	}
	buf := make([]byte, size)
	if _, err := io.ReadFull(fh, buf); err != nil {
		return nil, nil, fmt.Errorf("reading: %w", err)
	}
	return buf, nil, nil
}

// Close releases the file's buffer (unmapping it in LoadMmap mode). The
// tensors' Data must not be used afterwards.
func (f *File) Close() error {
	f.buf = nil
	if f.unmap == nil {
		return nil
	}
	err := f.unmap()
	f.unmap = nil
	if err != nil {
		return fmt.Errorf("gguf: %s: unmapping: %w", f.Name, err)
	}
	return nil
}

// Lookup returns the metadata value of key.
func (f *File) Lookup(key string) (Value, bool) {
	i, ok := f.kvIndex[key]
	if !ok {
		return Value{}, false
	}
	return f.KV[i].Value, true
}

// Meta returns the metadata value of key, or the zero Value (whose
// accessors report false) when it is absent.
func (f *File) Meta(key string) Value {
	v, _ := f.Lookup(key)
	return v
}

// Architecture returns general.architecture ("llama", "qwen3", …).
func (f *File) Architecture() string {
	s, _ := f.Meta(KeyArchitecture).AsString()
	return s
}

// Tensor returns the tensor called name.
func (f *File) Tensor(name string) (tensor.Tensor, bool) {
	i, ok := f.tIndex[name]
	if !ok {
		return tensor.Tensor{}, false
	}
	return f.Tensors[i], true
}

// TensorOffset returns the absolute file offset of the data of the tensor
// called name.
func (f *File) TensorOffset(name string) (int64, bool) {
	i, ok := f.tIndex[name]
	if !ok {
		return 0, false
	}
	return f.offsets[i], true
}
