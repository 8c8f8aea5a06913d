package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"

	"fusion/engine/tensor"
)

// MaxHeaderSize caps the JSON header, as the Python library does (100 MB).
const MaxHeaderSize = 100 << 20

// metadataKey is the reserved header key of the free-form string map.
const metadataKey = "__metadata__"

// entry is one validated tensor description; begin and end are relative to
// the data section.
type entry struct {
	name       string
	dtype      tensor.DType
	shape      []int64
	begin, end int64
}

// header is a validated file header.
type header struct {
	entries   []entry // header order
	metadata  map[string]string
	dataStart int64 // 8 + header length
}

// rawEntry is a tensor description as it appears in the JSON. Unknown
// fields are ignored, as the Python library ignores them.
type rawEntry struct {
	DType       string  `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// headerLength reads and bounds-checks the 8-byte length prefix. prefix
// holds at least 8 bytes; fileSize is the size of the whole file.
func headerLength(file string, prefix []byte, fileSize int64) (int64, error) {
	if fileSize < 8 || len(prefix) < 8 {
		return 0, formatErr(file, "", ErrTruncated, "%d bytes, shorter than the 8-byte header length", fileSize)
	}
	n := binary.LittleEndian.Uint64(prefix[:8])
	if n > MaxHeaderSize {
		return 0, formatErr(file, "", ErrHeaderTooLarge, "header length %d exceeds the %d-byte limit", n, MaxHeaderSize)
	}
	if int64(n) > fileSize-8 {
		return 0, formatErr(file, "", ErrTruncated, "header length %d exceeds the %d bytes after the length prefix", n, fileSize-8)
	}
	return int64(n), nil
}

// parseHeader validates the header held in hdr (the JSON bytes, without the
// length prefix) of a file of fileSize bytes.
func parseHeader(file string, hdr []byte, fileSize int64) (*header, error) {
	h := &header{dataStart: 8 + int64(len(hdr))}
	dataLen := fileSize - h.dataStart
	if len(hdr) == 0 || hdr[0] != '{' {
		return nil, formatErr(file, "", ErrBadJSON, "header does not start with '{'")
	}
	dec := json.NewDecoder(bytes.NewReader(hdr))
	if _, err := dec.Token(); err != nil { // the opening '{'
		return nil, formatErr(file, "", ErrBadJSON, "%v", err)
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, formatErr(file, "", ErrBadJSON, "%v", err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, formatErr(file, "", ErrBadJSON, "expected a key, found %v", tok)
		}
		if name == metadataKey {
			if h.metadata != nil || seen[name] {
				return nil, formatErr(file, "", ErrBadMetadata, "appears twice")
			}
			seen[name] = true
			var md map[string]string
			if err := dec.Decode(&md); err != nil {
				if isSyntaxError(err) {
					return nil, formatErr(file, "", ErrBadJSON, "%v", err)
				}
				return nil, formatErr(file, "", ErrBadMetadata, "%v", err)
			}
			h.metadata = md
			continue
		}
		if seen[name] {
			return nil, formatErr(file, name, ErrDuplicate, "the name appears twice in the header")
		}
		seen[name] = true
		var raw rawEntry
		if err := dec.Decode(&raw); err != nil {
			return nil, formatErr(file, name, ErrBadJSON, "%v", err)
		}
		e, err := validateEntry(file, name, raw, dataLen)
		if err != nil {
			return nil, err
		}
		h.entries = append(h.entries, e)
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, formatErr(file, "", ErrBadJSON, "%v", err)
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = fmt.Errorf("unexpected %v", tok)
		}
		return nil, formatErr(file, "", ErrBadJSON, "trailing data after the header object: %v", err)
	}
	if err := checkOverlaps(file, h.entries); err != nil {
		return nil, err
	}
	return h, nil
}

func isSyntaxError(err error) bool {
	var se *json.SyntaxError
	return errors.As(err, &se) || errors.Is(err, io.ErrUnexpectedEOF)
}

// validateEntry checks one tensor description against the data section of
// dataLen bytes.
func validateEntry(file, name string, raw rawEntry, dataLen int64) (entry, error) {
	dt, ok := ParseDType(raw.DType)
	if !ok {
		return entry{}, formatErr(file, name, ErrBadDType, "%q", raw.DType)
	}
	if raw.Shape == nil {
		return entry{}, formatErr(file, name, ErrBadShape, "missing shape")
	}
	n, err := tensor.NumElements(raw.Shape)
	if err != nil {
		return entry{}, formatErr(file, name, ErrBadShape, "%v", err)
	}
	size, err := dt.ByteSize(n)
	if err != nil {
		return entry{}, formatErr(file, name, ErrBadShape, "%v", err)
	}
	if len(raw.DataOffsets) != 2 {
		return entry{}, formatErr(file, name, ErrBadOffsets, "want [begin, end], found %d values", len(raw.DataOffsets))
	}
	begin, end := raw.DataOffsets[0], raw.DataOffsets[1]
	if begin < 0 || end < begin {
		return entry{}, formatErr(file, name, ErrBadOffsets, "[%d, %d] is not a range", begin, end)
	}
	if end > dataLen {
		return entry{}, formatErr(file, name, ErrBadOffsets, "[%d, %d] ends past the %d-byte data section", begin, end, dataLen)
	}
	if end-begin != size {
		return entry{}, formatErr(file, name, ErrSizeMismatch, "data_offsets [%d, %d] hold %d bytes, %s %v needs %d", begin, end, end-begin, dt, raw.Shape, size)
	}
	return entry{name: name, dtype: dt, shape: raw.Shape, begin: begin, end: end}, nil
}

// checkOverlaps rejects tensors sharing bytes, whatever order the header
// lists them in. Empty tensors occupy nothing and never overlap.
func checkOverlaps(file string, entries []entry) error {
	idx := make([]int, 0, len(entries))
	for i, e := range entries {
		if e.end > e.begin {
			idx = append(idx, i)
		}
	}
	sort.Slice(idx, func(a, b int) bool { return entries[idx[a]].begin < entries[idx[b]].begin })
	for k := 1; k < len(idx); k++ {
		prev, cur := entries[idx[k-1]], entries[idx[k]]
		if cur.begin < prev.end {
			return formatErr(file, cur.name, ErrOverlap, "[%d, %d] overlaps %q [%d, %d]", cur.begin, cur.end, prev.name, prev.begin, prev.end)
		}
	}
	return nil
}

// ParseDType maps a safetensors dtype name ("F32", "BF16", "U32", ...) to
// its tensor.DType. Types tensor does not model (F8_*, complex, ...) are
// reported as unknown.
func ParseDType(s string) (tensor.DType, bool) {
	for d := tensor.DType(1); d.Valid(); d++ {
		if !d.Quantized() && d.String() == s {
			return d, true
		}
	}
	return tensor.Invalid, false
}
