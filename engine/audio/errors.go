package audio

import (
	"errors"
	"fmt"
)

// Errors a caller branches on with errors.Is. Decode returns every failure
// about the input as an *Error wrapping exactly one of them.
var (
	// ErrNotAudio: the bytes are no audio container or codec we recognize.
	ErrNotAudio = errors.New("not a recognized audio format")
	// ErrTruncated: the stream ends before its header or frames say it
	// does (a WAV data chunk larger than the file, a cut-off frame).
	ErrTruncated = errors.New("audio is truncated")
	// ErrMalformed: the header contradicts itself or the data (a block
	// align that does not match channels × bits, zero channels, a corrupt
	// frame).
	ErrMalformed = errors.New("malformed audio")
	// ErrUnsupported: a recognized container holding a codec or sample
	// format this build cannot decode; Error.Detail names it.
	ErrUnsupported = errors.New("unsupported audio codec")
	// ErrTooLarge: the upload has more bytes than Options.MaxBytes.
	ErrTooLarge = errors.New("audio file too large")
	// ErrTooLong: the audio lasts longer than Options.MaxDuration, or has
	// more channels or a higher rate than Options allows.
	ErrTooLong = errors.New("audio exceeds a limit")
	// ErrNoFFmpeg: the format needs ffmpeg and it is not installed (or
	// Options.FFmpeg is "off").
	ErrNoFFmpeg = errors.New("ffmpeg is not installed")
)

// Error reports what is wrong with an input and in which format.
type Error struct {
	Format string // sniffed format ("wav", "flac", "mp3", "ogg/vorbis", "m4a", ...), "" when unknown
	Err    error  // one of the Err* sentinels
	Detail string // specifics for the client: sizes, the codec's name, the decoder's message
}

func (e *Error) Error() string {
	s := "audio: "
	if e.Format != "" {
		s += e.Format + ": "
	}
	s += e.Err.Error()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

func errorf(format string, sentinel error, detail string, args ...any) *Error {
	return &Error{Format: format, Err: sentinel, Detail: fmt.Sprintf(detail, args...)}
}
