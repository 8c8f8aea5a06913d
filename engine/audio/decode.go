package audio

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"time"
)

// Signal is decoded audio: Samples holds Channels interleaved channels at
// Rate frames per second, each value nominally in [-1, 1] (integer PCM is
// scaled by 2^(bits-1); float formats are passed through unclipped).
type Signal struct {
	Rate     int
	Channels int
	Samples  []float32
}

// Frames is the number of samples per channel.
func (s Signal) Frames() int {
	if s.Channels == 0 {
		return 0
	}
	return len(s.Samples) / s.Channels
}

// Duration is the length of the signal.
func (s Signal) Duration() time.Duration {
	if s.Rate == 0 {
		return 0
	}
	return time.Duration(float64(s.Frames()) / float64(s.Rate) * float64(time.Second))
}

// Defaults of Options; see each field.
const (
	DefaultMaxBytes    = 25 << 20 // OpenAI's upload limit for transcriptions
	DefaultMaxDuration = 30 * time.Minute
	DefaultMaxChannels = 8
	DefaultMaxRate     = 384000
	DefaultMaxSamples  = 30 * 60 * 48000 * 2 // 30 min of 48 kHz stereo: 691 MB of float32
)

// Options bounds what Decode accepts. Zero fields take the defaults above;
// the decoded signal takes at most 4 × MaxSamples bytes.
type Options struct {
	// MaxBytes caps the encoded input read from the reader.
	MaxBytes int64
	// MaxDuration caps the audio's length, checked from the header when
	// the format states it (WAV, FLAC, MP3, Vorbis, and what ffprobe
	// reports), and while decoding otherwise.
	MaxDuration time.Duration
	// MaxChannels and MaxRate cap the channel count and sample rate.
	MaxChannels int
	MaxRate     int
	// MaxSamples caps frames × channels of the decoded signal, so its
	// memory (4 bytes a sample), whatever the rate and channel count.
	MaxSamples int64
	// FFmpeg is the ffmpeg binary for the formats without a Go decoder
	// (Opus, AAC/M4A, ...): "" looks "ffmpeg" up on PATH, "off" disables
	// it. ffprobe is looked up next to it.
	FFmpeg string
}

func (o Options) withDefaults() Options {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxDuration <= 0 {
		o.MaxDuration = DefaultMaxDuration
	}
	if o.MaxChannels <= 0 {
		o.MaxChannels = DefaultMaxChannels
	}
	if o.MaxRate <= 0 {
		o.MaxRate = DefaultMaxRate
	}
	if o.MaxSamples <= 0 {
		o.MaxSamples = DefaultMaxSamples
	}
	return o
}

// maxFrames is the most frames per channel a signal at rate may have.
func (o Options) maxFrames(rate int) int64 {
	return int64(o.MaxDuration.Seconds() * float64(rate))
}

// checkFormat validates a stream's rate and channel count against the
// limits, then its length in frames (negative when unknown).
func (o Options) checkFormat(format string, rate, channels int, frames int64) error {
	switch {
	case channels <= 0:
		return errorf(format, ErrMalformed, "%d channels", channels)
	case rate <= 0:
		return errorf(format, ErrMalformed, "sample rate %d Hz", rate)
	case channels > o.MaxChannels:
		return errorf(format, ErrTooLong, "%d channels, the limit is %d", channels, o.MaxChannels)
	case rate > o.MaxRate:
		return errorf(format, ErrTooLong, "sample rate %d Hz, the limit is %d Hz", rate, o.MaxRate)
	}
	return o.checkFrames(format, rate, channels, frames)
}

// checkFrames checks a length in frames (negative: unknown) against
// MaxDuration and MaxSamples.
func (o Options) checkFrames(format string, rate, channels int, frames int64) error {
	if frames > o.maxFrames(rate) {
		return errorf(format, ErrTooLong, "%.1f s of audio, the limit is %s",
			float64(frames)/float64(rate), o.MaxDuration)
	}
	if frames*int64(channels) > o.MaxSamples {
		return errorf(format, ErrTooLong, "%d frames of %d channels, the limit is %d samples",
			frames, channels, o.MaxSamples)
	}
	return nil
}

// preallocLen bounds what a decoder reserves from a length its header
// declares: a forged header may claim the whole duration limit in a few
// bytes, so beyond 1 Mi samples the slice grows as samples really come.
func preallocLen(declared int64) int64 {
	return max(0, min(declared, 1<<20))
}

// Decode reads at most opts.MaxBytes from r, recognizes the format from the
// bytes and decodes it whole. Input problems are *Error values; ctx stops a
// long decode (and kills ffmpeg).
func Decode(ctx context.Context, r io.Reader, opts Options) (Signal, error) {
	opts = opts.withDefaults()
	data, err := io.ReadAll(io.LimitReader(r, opts.MaxBytes+1))
	if err != nil {
		return Signal{}, fmt.Errorf("audio: reading input: %w", err)
	}
	if int64(len(data)) > opts.MaxBytes {
		return Signal{}, errorf("", ErrTooLarge, "more than %d bytes", opts.MaxBytes)
	}
	return DecodeBytes(ctx, data, opts)
}

// DecodeBytes is Decode over bytes already in memory (not copied; not
// retained). opts.MaxBytes still applies.
func DecodeBytes(ctx context.Context, data []byte, opts Options) (Signal, error) {
	opts = opts.withDefaults()
	if int64(len(data)) > opts.MaxBytes {
		return Signal{}, errorf("", ErrTooLarge, "%d bytes, the limit is %d", len(data), opts.MaxBytes)
	}
	f := Sniff(data)
	var (
		sig Signal
		err error
	)
	switch f {
	case "":
		return Signal{}, errorf("", ErrNotAudio, "%d bytes starting %q", len(data), data[:min(len(data), 12)])
	case FormatWAV:
		sig, err = decodeWAV(ctx, data, opts)
	case FormatFLAC:
		sig, err = decodeFLAC(ctx, data, opts)
	case FormatMP3:
		sig, err = decodeMP3(ctx, data, opts)
	case FormatVorbis:
		sig, err = decodeVorbis(ctx, data, opts)
	default:
		sig, err = decodeFFmpeg(ctx, f, data, opts)
	}
	if err != nil {
		return Signal{}, err
	}
	if sig.Frames() == 0 {
		return Signal{}, errorf(f, ErrTruncated, "no audio samples")
	}
	return sig, nil
}

// Formats Sniff recognizes. The first four decode in Go; the rest need
// ffmpeg.
const (
	FormatWAV      = "wav"
	FormatFLAC     = "flac"
	FormatMP3      = "mp3"
	FormatVorbis   = "ogg/vorbis"
	FormatOpus     = "ogg/opus"
	FormatOggFLAC  = "ogg/flac"
	FormatOgg      = "ogg"        // another codec in Ogg: reported unsupported
	FormatMP4      = "m4a"        // ISO BMFF: M4A/MP4 (AAC, ALAC)
	FormatADTS     = "aac"        // raw AAC in ADTS frames
	FormatMPEG12   = "mpeg-audio" // MPEG-1/2 layer I or II
	FormatMatroska = "webm"
	FormatAIFF     = "aiff"
)

// Sniff names the audio format of data from its leading bytes, or returns
// "" when it recognizes none.
func Sniff(data []byte) string {
	switch {
	case len(data) >= 12 && string(data[:4]) == "RIFF" && string(data[8:12]) == "WAVE":
		return FormatWAV
	case bytes.HasPrefix(data, []byte("fLaC")):
		return FormatFLAC
	case bytes.HasPrefix(data, []byte("OggS")):
		return sniffOgg(data)
	case len(data) >= 12 && string(data[4:8]) == "ftyp":
		return FormatMP4
	case bytes.HasPrefix(data, []byte{0x1a, 0x45, 0xdf, 0xa3}):
		return FormatMatroska
	case len(data) >= 12 && string(data[:4]) == "FORM" && (string(data[8:12]) == "AIFF" || string(data[8:12]) == "AIFC"):
		return FormatAIFF
	}
	// MPEG audio, possibly behind an ID3v2 tag.
	if skip := id3Len(data); skip > 0 {
		if skip >= len(data) {
			return ""
		}
		if f := sniffMPEG(data[skip:]); f != "" {
			return f
		}
		if bytes.HasPrefix(data[skip:], []byte("fLaC")) {
			return FormatFLAC
		}
		return ""
	}
	return sniffMPEG(data)
}

// id3Len is the length of the ID3v2 tag data starts with, or 0.
func id3Len(data []byte) int {
	if len(data) < 10 || string(data[:3]) != "ID3" {
		return 0
	}
	size := int(data[6]&0x7f)<<21 | int(data[7]&0x7f)<<14 | int(data[8]&0x7f)<<7 | int(data[9]&0x7f)
	if data[5]&0x10 != 0 { // footer present
		size += 10
	}
	return 10 + size
}

// sniffMPEG recognizes an MPEG audio or ADTS frame header at the start,
// and for MPEG audio a second header where the first frame's length says
// (a lone 0xFFF pattern is too common in arbitrary bytes).
func sniffMPEG(data []byte) string {
	if len(data) < 4 || data[0] != 0xff || data[1]&0xe0 != 0xe0 {
		return ""
	}
	layer := (data[1] >> 1) & 3
	if data[1]&0xf0 == 0xf0 && layer == 0 {
		return FormatADTS
	}
	n := mpegFrameLen(data)
	if n <= 0 {
		return ""
	}
	if len(data) >= n+2 && (data[n] != 0xff || data[n+1]&0xe0 != 0xe0) {
		return ""
	}
	if layer == 1 { // layer III
		return FormatMP3
	}
	return FormatMPEG12
}

// mpegFrameLen is the byte length of the MPEG audio frame whose header
// starts h, or 0 when the header is invalid.
func mpegFrameLen(h []byte) int {
	version := (h[1] >> 3) & 3 // 0: 2.5, 2: 2, 3: 1
	layer := (h[1] >> 1) & 3   // 1: III, 2: II, 3: I
	bitrateIdx := h[2] >> 4
	rateIdx := (h[2] >> 2) & 3
	pad := int(h[2]>>1) & 1
	if version == 1 || layer == 0 || bitrateIdx == 0 || bitrateIdx == 15 || rateIdx == 3 {
		return 0
	}
	rates := [4][3]int{{11025, 12000, 8000}, {}, {22050, 24000, 16000}, {44100, 48000, 32000}}
	rate := rates[version][rateIdx]
	var kbps [16]int
	switch {
	case version == 3 && layer == 3:
		kbps = [16]int{0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448}
	case version == 3 && layer == 2:
		kbps = [16]int{0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384}
	case version == 3:
		kbps = [16]int{0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320}
	case layer == 3:
		kbps = [16]int{0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256}
	default:
		kbps = [16]int{0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160}
	}
	br := kbps[bitrateIdx] * 1000
	switch {
	case layer == 3:
		return (12*br/rate + pad) * 4
	case layer == 1 && version != 3:
		return 72*br/rate + pad
	default:
		return 144*br/rate + pad
	}
}

// sniffOgg looks at the first packet of the first Ogg page.
func sniffOgg(data []byte) string {
	if len(data) < 27 {
		return FormatOgg
	}
	nseg := int(data[26])
	body := 27 + nseg
	if len(data) < body+8 {
		return FormatOgg
	}
	p := data[body:]
	switch {
	case bytes.HasPrefix(p, []byte("\x01vorbis")):
		return FormatVorbis
	case bytes.HasPrefix(p, []byte("OpusHead")):
		return FormatOpus
	case bytes.HasPrefix(p, []byte("\x7fFLAC")):
		return FormatOggFLAC
	}
	return FormatOgg
}

// le16/le32 read little-endian integers.
func le16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }
func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// Mono averages the channels of s into one.
func Mono(s Signal) Signal {
	if s.Channels <= 1 {
		return s
	}
	n := s.Frames()
	out := make([]float32, n)
	inv := 1 / float64(s.Channels)
	for i := range n {
		var sum float64
		for _, v := range s.Samples[i*s.Channels : (i+1)*s.Channels] {
			sum += float64(v)
		}
		out[i] = float32(sum * inv)
	}
	return Signal{Rate: s.Rate, Channels: 1, Samples: out}
}
