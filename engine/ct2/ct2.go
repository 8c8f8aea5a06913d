// Package ct2 reads CTranslate2's model.bin: the weights of a model
// converted for CTranslate2 (faster-whisper's Whisper models among them)
// as named tensors, without CTranslate2.
//
// The file (binary version 6, the one current converters write) is, all
// integers little-endian: a u32 version; the spec name and a u32 spec
// revision; a u32 variable count, then per variable its name, a u8 rank,
// rank u32 dimensions, a u8 type (0 float32, 1 int8, 2 int16, 3 int32,
// 4 float16, 5 bfloat16), a u32 byte count and the bytes; then a u32
// alias count and per alias two names (the alias, the variable it stands
// for: the converter stores a tensor once when several weights are
// equal). A name is a u16 length counting a terminating NUL, then the
// bytes. Scalars are rank-0 variables; flags and strings are int8 values
// and arrays. config.json and the vocabulary sit beside model.bin and are
// not read here.
//
// Every count, length and size is checked against the bytes left before
// anything is allocated from it; a malformed file is a *FormatError
// wrapping one sentinel, never a panic.
package ct2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"fusion/engine/tensor"
)

// SupportedVersion is the binary version Parse reads.
const SupportedVersion = 6

// Limits on what Parse accepts.
const (
	MaxRank = 8
	// MaxFileSize caps Open's read (CTranslate2's u32 byte counts already
	// cap one tensor at 4 GiB).
	MaxFileSize = 64 << 30
)

// Errors a caller may branch on with errors.Is.
var (
	ErrTruncated    = errors.New("file truncated")
	ErrVersion      = errors.New("unsupported binary version")
	ErrBadDType     = errors.New("unknown data type")
	ErrBadShape     = errors.New("invalid shape")
	ErrSizeMismatch = errors.New("byte count does not match shape and type")
	ErrDuplicate    = errors.New("duplicate name")
	ErrBadName      = errors.New("malformed name")
	ErrBadAlias     = errors.New("alias to no variable")
	ErrTrailing     = errors.New("bytes after the last alias")
)

// FormatError says what is wrong with a file and where.
type FormatError struct {
	File     string
	Variable string
	Offset   int
	Err      error
	Detail   string
}

func (e *FormatError) Error() string {
	s := fmt.Sprintf("ct2: %s: offset %d", e.File, e.Offset)
	if e.Variable != "" {
		s += ": " + e.Variable
	}
	s += ": " + e.Err.Error()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (e *FormatError) Unwrap() error { return e.Err }

// dtypes maps CTranslate2's type ids to ours.
var dtypes = [...]tensor.DType{tensor.F32, tensor.I8, tensor.I16, tensor.I32, tensor.F16, tensor.BF16}

// Model is a parsed model.bin. Tensor data are views into the buffer it
// was parsed from.
type Model struct {
	Version  int
	Spec     string // e.g. "WhisperSpec"
	Revision int
	// Variables in file order (CTranslate2 writes them sorted by name).
	Variables []tensor.Tensor
	// Aliases maps an alias to the variable it stands for.
	Aliases map[string]string
	index   map[string]int
}

// Open reads and parses the model.bin at path.
func Open(path string) (*Model, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ct2: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("ct2: %w", err)
	}
	if st.Size() > MaxFileSize {
		return nil, fmt.Errorf("ct2: %s: %d bytes, the limit is %d", path, st.Size(), int64(MaxFileSize))
	}
	data := make([]byte, st.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, fmt.Errorf("ct2: reading %s: %w", path, err)
	}
	return Parse(path, data)
}

// reader walks the buffer, recording the first error.
type reader struct {
	file string
	b    []byte
	pos  int
	v    string // variable being read, for errors
}

func (r *reader) fail(err error, detail string, args ...any) *FormatError {
	return &FormatError{File: r.file, Variable: r.v, Offset: r.pos, Err: err, Detail: fmt.Sprintf(detail, args...)}
}

func (r *reader) need(n int, what string) error {
	if n < 0 || len(r.b)-r.pos < n {
		return r.fail(ErrTruncated, "%s needs %d bytes, %d left", what, n, len(r.b)-r.pos)
	}
	return nil
}

func (r *reader) u8(what string) (int, error) {
	if err := r.need(1, what); err != nil {
		return 0, err
	}
	r.pos++
	return int(r.b[r.pos-1]), nil
}

func (r *reader) u32(what string) (int64, error) {
	if err := r.need(4, what); err != nil {
		return 0, err
	}
	r.pos += 4
	return int64(binary.LittleEndian.Uint32(r.b[r.pos-4:])), nil
}

func (r *reader) str(what string) (string, error) {
	if err := r.need(2, what); err != nil {
		return "", err
	}
	n := int(binary.LittleEndian.Uint16(r.b[r.pos:]))
	r.pos += 2
	if n == 0 {
		return "", r.fail(ErrBadName, "%s of length 0 (the length counts a NUL)", what)
	}
	if err := r.need(n, what); err != nil {
		return "", err
	}
	s := r.b[r.pos : r.pos+n]
	if s[n-1] != 0 {
		return "", r.fail(ErrBadName, "%s not NUL-terminated", what)
	}
	r.pos += n
	return string(s[:n-1]), nil
}

// Parse reads a model.bin held in data (name is for errors). The returned
// tensors alias data.
func Parse(name string, data []byte) (*Model, error) {
	r := &reader{file: name, b: data}
	version, err := r.u32("binary version")
	if err != nil {
		return nil, err
	}
	if version != SupportedVersion {
		return nil, r.fail(ErrVersion, "version %d, this reader supports %d", version, SupportedVersion)
	}
	m := &Model{Version: int(version), Aliases: map[string]string{}, index: map[string]int{}}
	if m.Spec, err = r.str("spec name"); err != nil {
		return nil, err
	}
	rev, err := r.u32("spec revision")
	if err != nil {
		return nil, err
	}
	m.Revision = int(rev)
	count, err := r.u32("variable count")
	if err != nil {
		return nil, err
	}
	// Each variable takes at least 2+1 (name) + 1 (rank) + 1 (type) + 4
	// (size) bytes: a count the file cannot hold is truncation, found
	// before allocating for it.
	if err := r.need(int(min(count*9, int64(len(data)+1))), fmt.Sprintf("%d variables", count)); err != nil {
		return nil, err
	}
	m.Variables = make([]tensor.Tensor, 0, count)
	for range count {
		r.v = ""
		vname, err := r.str("variable name")
		if err != nil {
			return nil, err
		}
		r.v = vname
		if _, dup := m.index[vname]; dup {
			return nil, r.fail(ErrDuplicate, "variable defined twice")
		}
		rank, err := r.u8("rank")
		if err != nil {
			return nil, err
		}
		if rank > MaxRank {
			return nil, r.fail(ErrBadShape, "rank %d, the limit is %d", rank, MaxRank)
		}
		shape := make([]int64, rank)
		for i := range shape {
			if shape[i], err = r.u32("dimension"); err != nil {
				return nil, err
			}
		}
		tid, err := r.u8("data type")
		if err != nil {
			return nil, err
		}
		if tid >= len(dtypes) {
			return nil, r.fail(ErrBadDType, "type id %d", tid)
		}
		dt := dtypes[tid]
		size, err := r.u32("byte count")
		if err != nil {
			return nil, err
		}
		elems, err := tensor.NumElements(shape)
		if err != nil {
			return nil, r.fail(ErrBadShape, "%v", err)
		}
		want, err := dt.ByteSize(elems)
		if err != nil || want != size {
			return nil, r.fail(ErrSizeMismatch, "%d bytes for %v of %v (%d expected)", size, shape, dt, want)
		}
		if err := r.need(int(size), "tensor data"); err != nil {
			return nil, err
		}
		m.index[vname] = len(m.Variables)
		m.Variables = append(m.Variables, tensor.Tensor{Name: vname, DType: dt, Shape: shape, Data: data[r.pos : r.pos+int(size) : r.pos+int(size)]})
		r.pos += int(size)
	}
	r.v = ""
	naliases, err := r.u32("alias count")
	if err != nil {
		return nil, err
	}
	if err := r.need(int(min(naliases*6, int64(len(data)+1))), fmt.Sprintf("%d aliases", naliases)); err != nil {
		return nil, err
	}
	for range naliases {
		r.v = ""
		alias, err := r.str("alias name")
		if err != nil {
			return nil, err
		}
		r.v = alias
		target, err := r.str("alias target")
		if err != nil {
			return nil, err
		}
		if _, dup := m.index[alias]; dup {
			return nil, r.fail(ErrDuplicate, "alias has a variable's name")
		}
		if _, dup := m.Aliases[alias]; dup {
			return nil, r.fail(ErrDuplicate, "alias defined twice")
		}
		m.Aliases[alias] = target
	}
	r.v = ""
	if r.pos != len(data) {
		return nil, r.fail(ErrTrailing, "%d bytes", len(data)-r.pos)
	}
	// Every alias must end at a variable (chains are followed; a cycle or
	// a dangling name is an error).
	for alias := range m.Aliases {
		if _, ok := m.resolve(alias); !ok {
			return nil, &FormatError{File: name, Variable: alias, Offset: r.pos, Err: ErrBadAlias, Detail: "target " + m.Aliases[alias]}
		}
	}
	return m, nil
}

// resolve follows aliases to a variable's index.
func (m *Model) resolve(name string) (int, bool) {
	for range len(m.Aliases) + 1 {
		if i, ok := m.index[name]; ok {
			return i, true
		}
		next, ok := m.Aliases[name]
		if !ok {
			return 0, false
		}
		name = next
	}
	return 0, false // a cycle
}

// Tensor returns the variable called name, following an alias; the
// returned tensor carries the asked name.
func (m *Model) Tensor(name string) (tensor.Tensor, bool) {
	i, ok := m.resolve(name)
	if !ok {
		return tensor.Tensor{}, false
	}
	t := m.Variables[i]
	t.Name = name
	return t, true
}

// Names lists every variable and alias name, sorted.
func (m *Model) Names() []string {
	out := make([]string, 0, len(m.Variables)+len(m.Aliases))
	for _, v := range m.Variables {
		out = append(out, v.Name)
	}
	for a := range m.Aliases {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// Int reads an integer scalar variable (int8, int16 or int32; CTranslate2
// stores flags as int8).
func (m *Model) Int(name string) (int64, error) {
	t, ok := m.Tensor(name)
	if !ok {
		return 0, fmt.Errorf("ct2: no variable %q", name)
	}
	if len(t.Shape) != 0 {
		return 0, fmt.Errorf("ct2: %s has shape %v, not a scalar", name, t.Shape)
	}
	switch t.DType {
	case tensor.I8:
		return int64(int8(t.Data[0])), nil
	case tensor.I16:
		return int64(int16(binary.LittleEndian.Uint16(t.Data))), nil
	case tensor.I32:
		return int64(int32(binary.LittleEndian.Uint32(t.Data))), nil
	}
	return 0, fmt.Errorf("ct2: %s is %v, not an integer", name, t.DType)
}
