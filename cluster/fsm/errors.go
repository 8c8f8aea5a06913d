package fsm

import "fmt"

// Code classifies an Apply failure; it travels over gRPC as a number.
type Code uint32

// Failure codes. Never renumber: they are stored in the dedup table.
const (
	CodeOK         Code = 0
	CodeNotFound   Code = 1
	CodeExists     Code = 2
	CodeConflict   Code = 3 // CAS mismatch or a concurrent session turn
	CodeSessionCap Code = 4
	CodeInvalid    Code = 5
	CodeStale      Code = 6 // a stale placement generation (fencing)
)

func (c Code) String() string {
	switch c {
	case CodeOK:
		return "ok"
	case CodeNotFound:
		return "not found"
	case CodeExists:
		return "already exists"
	case CodeConflict:
		return "conflict"
	case CodeSessionCap:
		return "session cap reached"
	case CodeInvalid:
		return "invalid"
	case CodeStale:
		return "stale generation"
	}
	return fmt.Sprintf("code %d", uint32(c))
}

// Error is a typed Apply failure. errors.Is matches the sentinels below by
// code.
type Error struct {
	Code Code
	Msg  string
	// CurrentIndex is the object's current modify index/version on a
	// conflict (0 when it does not exist).
	CurrentIndex uint64
}

func (e *Error) Error() string {
	if e.Msg == "" {
		return "fsm: " + e.Code.String()
	}
	return "fsm: " + e.Code.String() + ": " + e.Msg
}

// Is matches any *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinels for errors.Is.
var (
	ErrNotFound   = &Error{Code: CodeNotFound}
	ErrExists     = &Error{Code: CodeExists}
	ErrConflict   = &Error{Code: CodeConflict}
	ErrSessionCap = &Error{Code: CodeSessionCap}
	ErrInvalid    = &Error{Code: CodeInvalid}
	ErrStale      = &Error{Code: CodeStale}
)

func errorf(c Code, cur uint64, format string, args ...any) *Error {
	return &Error{Code: c, Msg: fmt.Sprintf(format, args...), CurrentIndex: cur}
}

// ErrorFromCode rebuilds an *Error from its wire form (nil for CodeOK).
func ErrorFromCode(c Code, msg string, cur uint64) error {
	if c == CodeOK {
		return nil
	}
	return &Error{Code: c, Msg: msg, CurrentIndex: cur}
}
