package safetensors

import (
	"errors"
	"fmt"
)

// Errors a caller may branch on with errors.Is. Every error returned by
// Open and FromBytes for a malformed file is a *FormatError wrapping one of
// them.
var (
	// ErrTruncated: the file is shorter than its header says.
	ErrTruncated = errors.New("file truncated")
	// ErrHeaderTooLarge: the declared header length exceeds MaxHeaderSize.
	ErrHeaderTooLarge = errors.New("header too large")
	// ErrBadJSON: the header is not the expected JSON document.
	ErrBadJSON = errors.New("malformed header JSON")
	// ErrBadDType: a tensor has an unknown or unsupported dtype.
	ErrBadDType = errors.New("unsupported dtype")
	// ErrBadShape: a dimension is negative or the element count overflows.
	ErrBadShape = errors.New("invalid shape")
	// ErrBadOffsets: data_offsets are malformed or fall outside the data
	// section.
	ErrBadOffsets = errors.New("invalid data_offsets")
	// ErrSizeMismatch: data_offsets span a different number of bytes than
	// dtype and shape require.
	ErrSizeMismatch = errors.New("tensor size mismatch")
	// ErrOverlap: two tensors share bytes.
	ErrOverlap = errors.New("overlapping tensors")
	// ErrDuplicate: a tensor name appears twice.
	ErrDuplicate = errors.New("duplicate tensor name")
	// ErrBadMetadata: "__metadata__" is not a map of strings.
	ErrBadMetadata = errors.New("invalid __metadata__")
)

// FormatError reports what is wrong with a file, and where.
type FormatError struct {
	File   string // path or name given to Open/FromBytes
	Tensor string // offending tensor, if any
	Err    error  // one of the Err* sentinels
	Detail string // human-readable specifics
}

func (e *FormatError) Error() string {
	msg := "safetensors: " + e.File + ": "
	if e.Tensor != "" {
		msg += fmt.Sprintf("tensor %q: ", e.Tensor)
	}
	msg += e.Err.Error()
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

func (e *FormatError) Unwrap() error { return e.Err }

func formatErr(file, tensorName string, err error, format string, args ...any) error {
	return &FormatError{File: file, Tensor: tensorName, Err: err, Detail: fmt.Sprintf(format, args...)}
}
