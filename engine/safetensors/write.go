package safetensors

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"unicode/utf8"

	"fusion/engine/tensor"
	"fusion/internal/atomicfile"
)

// Write writes tensors, in the order given, and metadata as a safetensors
// file: compact JSON with "__metadata__" first (omitted when metadata is
// nil; keys sorted), each tensor as {"dtype","shape","data_offsets"},
// padded with spaces to a multiple of 8 bytes, then the data back to back.
// This is byte for byte what the Python library writes for the same
// tensor order (it orders tensors by dtype, then name).
func Write(w io.Writer, tensors []tensor.Tensor, metadata map[string]string) error {
	hdr, err := encodeHeader(tensors, metadata)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var prefix [8]byte
	n := uint64(len(hdr))
	for i := range prefix {
		prefix[i] = byte(n >> (8 * i))
	}
	if _, err := bw.Write(prefix[:]); err != nil {
		return fmt.Errorf("safetensors: write: %w", err)
	}
	if _, err := bw.Write(hdr); err != nil {
		return fmt.Errorf("safetensors: write: %w", err)
	}
	for _, t := range tensors {
		if _, err := bw.Write(t.Data); err != nil {
			return fmt.Errorf("safetensors: write %s: %w", t.Name, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("safetensors: write: %w", err)
	}
	return nil
}

// WriteFile writes the file atomically: into a temporary file in the same
// directory, renamed over path once complete.
func WriteFile(path string, tensors []tensor.Tensor, metadata map[string]string) error {
	if err := atomicfile.Write(path, func(w io.Writer) error { return Write(w, tensors, metadata) }); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

// encodeHeader validates the tensors and returns the padded JSON header.
func encodeHeader(tensors []tensor.Tensor, metadata map[string]string) ([]byte, error) {
	var b []byte
	b = append(b, '{')
	if metadata != nil {
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b = appendString(b, metadataKey)
		b = append(b, ":{"...)
		for i, k := range keys {
			if !utf8.ValidString(k) || !utf8.ValidString(metadata[k]) {
				return nil, fmt.Errorf("safetensors: metadata %q is not valid UTF-8", k)
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendString(b, metadata[k])
		}
		b = append(b, '}')
	}
	seen := make(map[string]bool, len(tensors))
	var offset int64
	for i, t := range tensors {
		if err := checkTensor(t, seen); err != nil {
			return nil, err
		}
		if i > 0 || metadata != nil {
			b = append(b, ',')
		}
		b = appendString(b, t.Name)
		b = append(b, `:{"dtype":`...)
		b = appendString(b, t.DType.String())
		b = append(b, `,"shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, d, 10)
		}
		b = append(b, `],"data_offsets":[`...)
		b = strconv.AppendInt(b, offset, 10)
		b = append(b, ',')
		offset += int64(len(t.Data))
		b = strconv.AppendInt(b, offset, 10)
		b = append(b, "]}"...)
	}
	b = append(b, '}')
	for len(b)%8 != 0 {
		b = append(b, ' ')
	}
	if len(b) > MaxHeaderSize {
		return nil, fmt.Errorf("safetensors: header of %d bytes exceeds the %d-byte limit", len(b), MaxHeaderSize)
	}
	return b, nil
}

func checkTensor(t tensor.Tensor, seen map[string]bool) error {
	switch {
	case t.Name == "":
		return errors.New("safetensors: tensor with an empty name")
	case t.Name == metadataKey:
		return fmt.Errorf("safetensors: tensor name %q is reserved", t.Name)
	case !utf8.ValidString(t.Name):
		return fmt.Errorf("safetensors: tensor name %q is not valid UTF-8", t.Name)
	case seen[t.Name]:
		return fmt.Errorf("safetensors: %w: %q", ErrDuplicate, t.Name)
	}
	seen[t.Name] = true
	if _, ok := ParseDType(t.DType.String()); !ok {
		return fmt.Errorf("safetensors: tensor %q: %w: %v", t.Name, ErrBadDType, t.DType)
	}
	n, err := tensor.NumElements(t.Shape)
	if err != nil {
		return fmt.Errorf("safetensors: tensor %q: %w", t.Name, err)
	}
	size, err := t.DType.ByteSize(n)
	if err != nil {
		return fmt.Errorf("safetensors: tensor %q: %w", t.Name, err)
	}
	if int64(len(t.Data)) != size {
		return fmt.Errorf("safetensors: tensor %q: %w: %d bytes of data, %s %v needs %d", t.Name, ErrSizeMismatch, len(t.Data), t.DType, t.Shape, size)
	}
	return nil
}

// appendString appends s as a JSON string escaped the way serde_json (the
// Python library's serializer) escapes it: quote, backslash and control
// characters only; everything else is written raw.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			if c < 0x20 {
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			} else {
				b = append(b, c)
			}
		}
	}
	return append(b, '"')
}
