package audio

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"

	"github.com/hajimehoshi/go-mp3"
	"github.com/jfreymuth/oggvorbis"
	"github.com/mewkiz/flac"
)

// safely runs a third-party decoder over untrusted bytes, turning a panic
// inside it into ErrMalformed so a hostile upload cannot take the server
// down.
func safely(format string, fn func() (Signal, error)) (sig Signal, err error) {
	defer func() {
		if r := recover(); r != nil {
			sig, err = Signal{}, errorf(format, ErrMalformed, "decoder failed: %v", r)
		}
	}()
	return fn()
}

// maxIdleReads is how many reads in a row may return no samples and no
// error before a stream decoder is declared stuck (a malformed stream must
// not spin forever).
const maxIdleReads = 64

// pull drives a streaming decoder until io.EOF: read appends what one
// call decodes to dst. It checks ctx between reads, the length limits as
// samples arrive, and that the decoder makes progress.
func pull(ctx context.Context, format string, opts Options, rate, channels int, out []float32, read func(dst []float32) ([]float32, error)) ([]float32, error) {
	idle := 0
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		before := len(out)
		var err error
		out, err = read(out)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, decoderError(format, err)
		}
		if len(out) > before {
			idle = 0
		} else if idle++; idle > maxIdleReads {
			return nil, errorf(format, ErrMalformed, "the decoder makes no progress")
		}
		if err := opts.checkFrames(format, rate, channels, int64(len(out)/channels)); err != nil {
			return nil, err
		}
	}
}

// decoderError classifies an error from a third-party decoder: a context
// error passes through, an unexpected end of input is ErrTruncated, the
// rest ErrMalformed with the decoder's message.
func decoderError(format string, err error) error {
	var e *Error
	switch {
	case errors.As(err, &e), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return errorf(format, ErrTruncated, "%v", err)
	}
	return errorf(format, ErrMalformed, "%v", err)
}

// decodeFLAC decodes with mewkiz/flac. STREAMINFO's total sample count,
// when set, bounds the duration before decoding and must match what the
// frames hold (a file cut at a frame boundary is truncated, not short).
func decodeFLAC(ctx context.Context, data []byte, opts Options) (Signal, error) {
	const f = FormatFLAC
	return safely(f, func() (Signal, error) {
		stream, err := flac.New(bytes.NewReader(data))
		if err != nil {
			return Signal{}, decoderError(f, err)
		}
		info := stream.Info
		rate, channels := int(info.SampleRate), int(info.NChannels)
		total := int64(-1)
		if info.NSamples > 0 {
			total = int64(min(info.NSamples, 1<<62))
		}
		if err := opts.checkFormat(f, rate, channels, total); err != nil {
			return Signal{}, err
		}
		var out []float32
		if total > 0 {
			out = make([]float32, 0, preallocLen(total*int64(channels)))
		}
		for {
			if err := ctx.Err(); err != nil {
				return Signal{}, err
			}
			fr, err := stream.ParseNext()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return Signal{}, decoderError(f, err)
			}
			if len(fr.Subframes) != channels {
				return Signal{}, errorf(f, ErrMalformed, "frame with %d channels in a %d-channel stream", len(fr.Subframes), channels)
			}
			bits := int(fr.BitsPerSample)
			if bits == 0 || bits > 32 {
				return Signal{}, errorf(f, ErrMalformed, "frame with %d bits per sample", bits)
			}
			scale := 1 / float64(int64(1)<<(bits-1))
			n := fr.Subframes[0].NSamples
			for i := range n {
				for c := range channels {
					out = append(out, float32(float64(fr.Subframes[c].Samples[i])*scale))
				}
			}
			if err := opts.checkFrames(f, rate, channels, int64(len(out)/channels)); err != nil {
				return Signal{}, err
			}
		}
		if got := int64(len(out) / channels); total > 0 && got != total {
			if got < total {
				return Signal{}, errorf(f, ErrTruncated, "STREAMINFO declares %d samples, the frames hold %d", total, got)
			}
			return Signal{}, errorf(f, ErrMalformed, "STREAMINFO declares %d samples, the frames hold %d", total, got)
		}
		return Signal{Rate: rate, Channels: channels, Samples: out}, nil
	})
}

// decodeMP3 decodes MPEG-1/2/2.5 layer III with hajimehoshi/go-mp3, which
// always produces 16-bit stereo (a mono file's channel is duplicated). Over
// a seekable source it scans the frame headers first, so the duration is
// known before decoding.
func decodeMP3(ctx context.Context, data []byte, opts Options) (Signal, error) {
	const f = FormatMP3
	return safely(f, func() (Signal, error) {
		d, err := mp3.NewDecoder(bytes.NewReader(data))
		if err != nil {
			return Signal{}, decoderError(f, err)
		}
		const channels = 2
		rate := d.SampleRate()
		frames := d.Length() / (2 * channels)
		if err := opts.checkFormat(f, rate, channels, frames); err != nil {
			return Signal{}, err
		}
		out := make([]float32, 0, preallocLen(frames*channels))
		buf := make([]byte, 1<<16)
		pending := 0 // an odd byte left from the last read, at buf[0]
		out, err = pull(ctx, f, opts, rate, channels, out, func(dst []float32) ([]float32, error) {
			n, err := d.Read(buf[pending:])
			n += pending
			even := n &^ 1
			for i := 0; i < even; i += 2 {
				dst = append(dst, float32(int16(binary.LittleEndian.Uint16(buf[i:])))/(1<<15))
			}
			pending = copy(buf, buf[even:n])
			return dst, err
		})
		if err != nil {
			return Signal{}, err
		}
		out = out[:len(out)/channels*channels]
		if g, ok := parseGapless(data); ok {
			out = g.trim(out, channels)
		}
		return Signal{Rate: rate, Channels: channels, Samples: out}, nil
	})
}

// mp3Gapless is what a Xing/Info frame with a LAME extension says about
// the stream: the frame count after it, samples per frame, and the
// encoder's delay and padding in samples.
type mp3Gapless struct {
	frames, spf, delay, padding int
}

// mp3DecoderDelay is the delay of the standard MPEG layer III synthesis
// filter bank (528 samples) plus one, which LAME's delay field excludes.
const mp3DecoderDelay = 529

// parseGapless reads the Xing/Info frame at the start of an MP3 (after
// any ID3v2 tag). Its frame count and LAME delay/padding fields are the
// de facto gapless standard: the valid samples are frames*spf - delay -
// padding, starting delay + 529 samples into the decoded output of the
// frames after the Info frame (which itself decodes to spf samples of
// silence).
func parseGapless(data []byte) (mp3Gapless, bool) {
	h := data[min(id3Len(data), len(data)):]
	if len(h) < 4 || mpegFrameLen(h) == 0 || (h[1]>>1)&3 != 1 {
		return mp3Gapless{}, false
	}
	mpeg1 := (h[1]>>3)&3 == 3
	mono := h[3]>>6 == 3
	side := map[[2]bool]int{{true, false}: 32, {true, true}: 17, {false, false}: 17, {false, true}: 9}[[2]bool{mpeg1, mono}]
	spf := 576
	if mpeg1 {
		spf = 1152
	}
	p := 4 + side
	if len(h) < p+8 || (string(h[p:p+4]) != "Xing" && string(h[p:p+4]) != "Info") {
		return mp3Gapless{}, false
	}
	flags := binary.BigEndian.Uint32(h[p+4:])
	p += 8
	if flags&1 == 0 {
		return mp3Gapless{}, false
	}
	frames := int(binary.BigEndian.Uint32(h[p:]))
	p += 4
	if flags&2 != 0 {
		p += 4
	}
	if flags&4 != 0 {
		p += 100
	}
	if flags&8 != 0 {
		p += 4
	}
	// LAME extension: 9-byte encoder string, then 12 bytes of fields, then
	// 12 bits of delay and 12 bits of padding.
	if len(h) < p+24 || string(h[p:p+4]) != "LAME" && string(h[p:p+4]) != "Lavc" && string(h[p:p+4]) != "Lavf" {
		return mp3Gapless{}, false
	}
	d := h[p+21:]
	g := mp3Gapless{
		frames:  frames,
		spf:     spf,
		delay:   int(d[0])<<4 | int(d[1])>>4,
		padding: int(d[1]&0x0f)<<8 | int(d[2]),
	}
	return g, frames > 0
}

// trim cuts the Info frame's silence, the encoder delay with the decoder's
// and the end padding from interleaved decoded samples.
func (g mp3Gapless) trim(out []float32, channels int) []float32 {
	start := g.spf + g.delay + mp3DecoderDelay
	n := g.frames*g.spf - g.delay - g.padding
	total := len(out) / channels
	if n <= 0 || start >= total {
		return out
	}
	end := min(start+n, total)
	return out[start*channels : end*channels]
}

// decodeVorbis decodes Ogg Vorbis with jfreymuth/oggvorbis; the length
// comes from the last page's granule position before decoding.
func decodeVorbis(ctx context.Context, data []byte, opts Options) (Signal, error) {
	const f = FormatVorbis
	return safely(f, func() (Signal, error) {
		r, err := oggvorbis.NewReader(bytes.NewReader(data))
		if err != nil {
			return Signal{}, decoderError(f, err)
		}
		rate, channels := r.SampleRate(), r.Channels()
		frames := r.Length()
		if frames <= 0 {
			frames = -1
		}
		if err := opts.checkFormat(f, rate, channels, frames); err != nil {
			return Signal{}, err
		}
		out := make([]float32, 0, preallocLen(frames*int64(channels)))
		buf := make([]float32, 1<<14*channels)
		out, err = pull(ctx, f, opts, rate, channels, out, func(dst []float32) ([]float32, error) {
			n, err := r.Read(buf)
			return append(dst, buf[:n]...), err
		})
		if err != nil {
			return Signal{}, err
		}
		if frames > 0 && int64(len(out)/channels) < frames {
			return Signal{}, errorf(f, ErrTruncated, "the last page says %d samples, %d decoded", frames, len(out)/channels)
		}
		return Signal{Rate: rate, Channels: channels, Samples: out}, nil
	})
}
