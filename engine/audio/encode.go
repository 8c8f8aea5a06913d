package audio

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"sync"

	"github.com/mewkiz/flac"
	"github.com/mewkiz/flac/frame"
	"github.com/mewkiz/flac/meta"
)

// EncodeFormats are the output formats NewEncoder takes (OpenAI's
// response_format values of /v1/audio/speech). wav, pcm and flac are
// written in Go; mp3, opus and aac need ffmpeg (FFmpegFormats).
var (
	EncodeFormats = []string{"mp3", "opus", "aac", "flac", "wav", "pcm"}
	FFmpegFormats = []string{"mp3", "opus", "aac"}
)

// ContentType is the media type of an encoded format (OpenAI's).
func ContentType(format string) string {
	switch format {
	case "mp3":
		return "audio/mpeg"
	case "opus":
		return "audio/ogg"
	case "aac":
		return "audio/aac"
	case "flac":
		return "audio/flac"
	case "wav":
		return "audio/wav"
	}
	return "audio/pcm"
}

// EncodeOptions configure NewEncoder.
type EncodeOptions struct {
	// FFmpeg is the ffmpeg binary for mp3, opus and aac, as
	// Options.FFmpeg: "" looks ffmpeg up on PATH, "off" disables it.
	FFmpeg string
}

// Encoder writes a stream of 16-bit mono PCM in one format as it comes:
// each Write encodes what it can and hands it on, Close finishes the
// stream. Neither may be called after Close; an Encoder is not safe for
// concurrent use.
type Encoder interface {
	Write(pcm []int16) error
	Close() error
}

// ErrFormat: NewEncoder does not know the format.
var ErrFormat = errors.New("audio: unknown output format")

// CheckEncoder reports whether NewEncoder can make format here: nil, or
// ErrFormat, or an *Error wrapping ErrNoFFmpeg naming ffmpeg.
func CheckEncoder(format string, opts EncodeOptions) error {
	if !slices.Contains(EncodeFormats, format) {
		return fmt.Errorf("%w %q (one of %v)", ErrFormat, format, EncodeFormats)
	}
	if slices.Contains(FFmpegFormats, format) {
		_, err := encoderFFmpeg(format, opts)
		return err
	}
	return nil
}

// NewEncoder starts an encoder of format writing to w, for mono audio at
// rate. wav is a 16-bit PCM WAV whose header carries the "unknown length"
// sizes; pcm the raw little-endian samples; flac a FLAC stream of fixed
// 4096-sample blocks (github.com/mewkiz/flac's encoder, fixed-predictor
// subframes), its STREAMINFO without the total length and MD5 (unknown
// when the stream starts); mp3, opus (in Ogg) and aac (ADTS) are
// ffmpeg's, run under ctx with the PCM on its stdin and its output copied
// to w as it comes.
func NewEncoder(ctx context.Context, w io.Writer, format string, rate int, opts EncodeOptions) (Encoder, error) {
	if err := CheckEncoder(format, opts); err != nil {
		return nil, err
	}
	if rate <= 0 || rate > 655350 {
		return nil, fmt.Errorf("audio: encoding at a sample rate of %d Hz", rate)
	}
	switch format {
	case "wav":
		if err := WriteWAVHeader(w, rate, -1); err != nil {
			return nil, err
		}
		return pcmEncoder{w}, nil
	case "pcm":
		return pcmEncoder{w}, nil
	case "flac":
		return newFLACEncoder(w, rate)
	}
	return newFFmpegEncoder(ctx, w, format, rate, opts)
}

// pcmEncoder writes the samples as they are.
type pcmEncoder struct{ w io.Writer }

func (e pcmEncoder) Write(pcm []int16) error { return WritePCM16(e.w, pcm) }
func (e pcmEncoder) Close() error            { return nil }

// flacBlock is the FLAC encoder's block size (libFLAC's default).
const flacBlock = 4096

// flacEncoder buffers samples to whole blocks; Close writes the last,
// shorter one.
type flacEncoder struct {
	bw      *bufio.Writer
	enc     *flac.Encoder
	pending []int32
}

func newFLACEncoder(w io.Writer, rate int) (*flacEncoder, error) {
	bw := bufio.NewWriter(w)
	info := &meta.StreamInfo{BlockSizeMin: flacBlock, BlockSizeMax: flacBlock, SampleRate: uint32(rate), NChannels: 1, BitsPerSample: 16}
	enc, err := flac.NewEncoder(bw, info)
	if err != nil {
		return nil, fmt.Errorf("audio: flac: %w", err)
	}
	return &flacEncoder{bw: bw, enc: enc}, bw.Flush()
}

func (e *flacEncoder) Write(pcm []int16) error {
	for _, s := range pcm {
		e.pending = append(e.pending, int32(s))
	}
	n := len(e.pending) / flacBlock * flacBlock
	for i := 0; i < n; i += flacBlock {
		if err := e.frame(e.pending[i : i+flacBlock]); err != nil {
			return err
		}
	}
	e.pending = append(e.pending[:0], e.pending[n:]...)
	return e.bw.Flush()
}

func (e *flacEncoder) frame(samples []int32) error {
	f := &frame.Frame{
		Header: frame.Header{HasFixedBlockSize: true, BlockSize: uint16(len(samples)), SampleRate: e.enc.Info.SampleRate,
			Channels: frame.ChannelsMono, BitsPerSample: 16},
		Subframes: []*frame.Subframe{{SubHeader: frame.SubHeader{Pred: frame.PredVerbatim}, Samples: slices.Clone(samples), NSamples: len(samples)}},
	}
	if err := e.enc.WriteFrame(f); err != nil {
		return fmt.Errorf("audio: flac: %w", err)
	}
	return nil
}

func (e *flacEncoder) Close() error {
	if len(e.pending) > 0 {
		if err := e.frame(e.pending); err != nil {
			return err
		}
		e.pending = nil
	}
	// The encoder's own Close would only rewrite STREAMINFO on a seekable
	// writer (this one is not) and close nothing.
	return e.bw.Flush()
}

// encoderFFmpeg resolves ffmpeg for an output format.
func encoderFFmpeg(format string, opts EncodeOptions) (string, error) {
	if opts.FFmpeg == "off" {
		return "", errorf(format, ErrNoFFmpeg, "encoding %s needs ffmpeg, which is disabled on this server", format)
	}
	name := opts.FFmpeg
	if name == "" {
		name = "ffmpeg"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", errorf(format, ErrNoFFmpeg, "encoding %s needs ffmpeg (%v)", format, err)
	}
	return path, nil
}

// ffmpegEncoder feeds ffmpeg's stdin; a goroutine copies its stdout to
// the writer.
type ffmpegEncoder struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *stderrTail
	copied chan error
	once   sync.Once
	err    error
}

// ffmpegArgs are the output arguments of each ffmpeg format.
var ffmpegArgs = map[string][]string{
	"mp3":  {"-c:a", "libmp3lame", "-b:a", "64k", "-f", "mp3"},
	"opus": {"-c:a", "libopus", "-b:a", "32k", "-f", "ogg"},
	"aac":  {"-c:a", "aac", "-b:a", "64k", "-f", "adts"},
}

func newFFmpegEncoder(ctx context.Context, w io.Writer, format string, rate int, opts EncodeOptions) (*ffmpegEncoder, error) {
	path, err := encoderFFmpeg(format, opts)
	if err != nil {
		return nil, err
	}
	args := append([]string{"-hide_banner", "-loglevel", "error", "-nostdin", "-f", "s16le", "-ar", fmt.Sprint(rate), "-ac", "1", "-i", "pipe:0"},
		ffmpegArgs[format]...)
	cmd := exec.CommandContext(ctx, path, append(args, "pipe:1")...)
	e := &ffmpegEncoder{cmd: cmd, stderr: &stderrTail{}, copied: make(chan error, 1)}
	cmd.Stderr = e.stderr
	if e.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("audio: starting ffmpeg for %s: %w", format, err)
	}
	go func() {
		// Copy in small pieces so that the audio goes out as ffmpeg
		// makes it (w flushes when it is an http.ResponseWriter's
		// wrapper that does).
		_, err := io.Copy(w, stdout)
		if err != nil {
			io.Copy(io.Discard, stdout) // let ffmpeg finish
		}
		e.copied <- err
	}()
	return e, nil
}

func (e *ffmpegEncoder) Write(pcm []int16) error {
	if err := WritePCM16(e.stdin, pcm); err != nil {
		return fmt.Errorf("audio: ffmpeg: %w (%s)", err, e.stderr)
	}
	return nil
}

func (e *ffmpegEncoder) Close() error {
	e.once.Do(func() {
		e.stdin.Close()
		copyErr := <-e.copied
		if err := e.cmd.Wait(); err != nil {
			e.err = fmt.Errorf("audio: ffmpeg: %w (%s)", err, e.stderr)
		} else if copyErr != nil {
			e.err = copyErr
		}
	})
	return e.err
}
