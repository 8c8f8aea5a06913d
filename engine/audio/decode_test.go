package audio

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDecodeWAV has ffmpeg write every WAV sample format we read, at
// several rates and channel counts, and checks our samples against
// ffmpeg's own decode of the same bytes: integer PCM scaled by 2^(bits-1)
// is exact in float32 up to 24 bits; 32-bit and float64 are within one
// float32 rounding.
func TestDecodeWAV(t *testing.T) {
	cases := []struct {
		codec      string
		rate, ch   int
		extensible bool
		tol        float64
	}{
		{"pcm_u8", 8000, 1, false, 0},
		{"pcm_s16le", 16000, 1, false, 0},
		{"pcm_s16le", 44100, 2, false, 0},
		{"pcm_s16le", 48000, 6, true, 0}, // > 2 channels: WAVE_FORMAT_EXTENSIBLE
		{"pcm_s24le", 22050, 2, true, 0}, // > 16 bits: extensible
		{"pcm_s32le", 96000, 2, true, 6e-8},
		{"pcm_f32le", 11025, 3, true, 0}, // ffmpeg writes float as extensible
		{"pcm_f64le", 44100, 1, true, 6e-8},
	}
	for _, c := range cases {
		t.Run(c.codec+"/"+itoa(c.rate)+"/"+itoa(c.ch), func(t *testing.T) {
			x := testSignal(c.rate, c.ch, 0.3)
			data := encode(t, x, c.rate, c.ch, "a.wav", "-c:a", c.codec)
			if tag := le16(data[20:]); (tag == wavExtensible) != c.extensible {
				t.Fatalf("ffmpeg wrote format tag 0x%04x, the case expects extensible=%v", tag, c.extensible)
			}
			sig, err := Decode(context.Background(), bytes.NewReader(data), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if sig.Rate != c.rate || sig.Channels != c.ch || sig.Frames() != len(x)/c.ch {
				t.Fatalf("got %d Hz %d ch %d frames, want %d Hz %d ch %d frames", sig.Rate, sig.Channels, sig.Frames(), c.rate, c.ch, len(x)/c.ch)
			}
			ref := ffmpegDecode(t, data, c.ch)
			if d := maxDiff(sig.Samples, ref); d > c.tol {
				t.Fatalf("max |ours - ffmpeg| = %g, want <= %g", d, c.tol)
			}
			// And the samples are the signal we wrote, to the format's precision.
			if d := maxDiff64(sig.Samples, x); d > 1.0/128 {
				t.Fatalf("max |ours - source| = %g", d)
			}
		})
	}
}

// TestDecodeCodecs decodes FLAC, MP3 and Vorbis with the Go decoders and
// Opus and AAC in M4A through ffmpeg, each encoded by ffmpeg from the same
// source. FLAC must equal ffmpeg's decode exactly; the lossy codecs must
// keep the source's rate and channel count and match ffmpeg's decode
// (another decoder of the same bytes) to within a stated signal-to-error
// ratio after aligning for the encoder delay that ffmpeg trims and go-mp3
// does not.
func TestDecodeCodecs(t *testing.T) {
	cases := []struct {
		name     string
		file     string
		rate, ch int
		wantCh   int
		args     []string
		format   string
		minSNR   float64 // dB, ours vs ffmpeg's decode; +Inf: bit-exact
	}{
		{"flac16", "a.flac", 44100, 2, 2, []string{"-c:a", "flac", "-sample_fmt", "s16"}, FormatFLAC, math.Inf(1)},
		{"flac24", "a.flac", 48000, 1, 1, []string{"-c:a", "flac", "-sample_fmt", "s32", "-bits_per_raw_sample", "24"}, FormatFLAC, math.Inf(1)},
		{"mp3-stereo", "a.mp3", 44100, 2, 2, []string{"-c:a", "libmp3lame", "-b:a", "192k"}, FormatMP3, 70},
		{"mp3-mono-22k", "a.mp3", 22050, 1, 2, []string{"-c:a", "libmp3lame", "-b:a", "64k"}, FormatMP3, 70},
		{"vorbis", "a.ogg", 44100, 2, 2, []string{"-c:a", "libvorbis", "-q:a", "5"}, FormatVorbis, 120},
		{"opus", "a.opus", 48000, 2, 2, []string{"-c:a", "libopus", "-b:a", "96k"}, FormatOpus, math.Inf(1)},
		{"m4a-aac", "a.m4a", 44100, 1, 1, []string{"-c:a", "aac", "-b:a", "96k"}, FormatMP4, math.Inf(1)},
		{"webm-opus", "a.webm", 48000, 1, 1, []string{"-c:a", "libopus"}, FormatMatroska, math.Inf(1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := testSignal(c.rate, c.ch, 1.5)
			data := encode(t, x, c.rate, c.ch, c.file, c.args...)
			if got := Sniff(data); got != c.format {
				t.Fatalf("Sniff = %q, want %q", got, c.format)
			}
			sig, err := Decode(context.Background(), bytes.NewReader(data), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if sig.Rate != c.rate || sig.Channels != c.wantCh {
				t.Fatalf("got %d Hz %d ch, want %d Hz %d ch", sig.Rate, sig.Channels, c.rate, c.wantCh)
			}
			if d := sig.Duration().Seconds(); d < 1.49 || d > 1.51 {
				t.Fatalf("duration %.3f s, want 1.5 s", d)
			}
			ours, ref := sig.Samples, ffmpegDecode(t, data, c.ch)
			if c.wantCh != c.ch { // go-mp3 doubles a mono channel: compare one
				ours = Mono(sig).Samples
			}
			if math.IsInf(c.minSNR, 1) {
				if len(ref) != len(ours) || maxDiff(ours, ref) != 0 {
					t.Fatalf("differs from ffmpeg's decode: %d vs %d samples, max |Δ| %g", len(ours), len(ref), maxDiff(ours, ref))
				}
				return
			}
			// Gapless trimming (LAME's delay and padding) makes the lengths
			// and alignment equal, so the lag must be 0.
			if len(ours) != len(ref) {
				t.Fatalf("%d samples, ffmpeg decodes %d", len(ours), len(ref))
			}
			lag, snr := alignedSNR(ours, ref, c.ch, 3000)
			t.Logf("%s: lag %d frames, SNR vs ffmpeg %.1f dB", c.name, lag, snr)
			if lag != 0 || snr < c.minSNR {
				t.Fatalf("SNR vs ffmpeg's decode %.1f dB at lag %d, want >= %.0f at lag 0", snr, lag, c.minSNR)
			}
		})
	}
}

// alignedSNR finds the lag (ours later than ref by lag frames, 0..maxLag)
// that best aligns the two interleaved signals and returns it with the
// ratio of ref's energy to the difference's over the overlap.
func alignedSNR(ours, ref []float32, ch, maxLag int) (int, float64) {
	best, bestSNR := 0, math.Inf(-1)
	for lag := 0; lag <= maxLag; lag++ {
		var sig, noise float64
		n := min(len(ours)-lag*ch, len(ref))
		if n <= 0 {
			break
		}
		for i := 0; i < n; i++ {
			r := float64(ref[i])
			d := float64(ours[i+lag*ch]) - r
			sig += r * r
			noise += d * d
		}
		if snr := 10 * math.Log10(sig/noise); snr > bestSNR {
			best, bestSNR = lag, snr
		}
	}
	return best, bestSNR
}

func maxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}

func maxDiff64(a []float32, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i])-b[i]))
	}
	return m
}

// wavBytes builds a WAV file by hand: a fmt chunk from the arguments and a
// data chunk declaring dataSize bytes followed by body.
func wavBytes(tag, channels uint16, rate uint32, blockAlign, bits uint16, dataSize uint32, body []byte) []byte {
	var b bytes.Buffer
	b.WriteString("RIFF")
	binary.Write(&b, binary.LittleEndian, uint32(36+len(body)))
	b.WriteString("WAVEfmt ")
	for _, v := range []any{uint32(16), tag, channels, rate, rate * uint32(blockAlign), blockAlign, bits} {
		binary.Write(&b, binary.LittleEndian, v)
	}
	b.WriteString("data")
	binary.Write(&b, binary.LittleEndian, dataSize)
	b.Write(body)
	return b.Bytes()
}

// TestDecodeErrors: every way an upload can be wrong gives the sentinel a
// caller maps to a 400, and a message naming the problem.
func TestDecodeErrors(t *testing.T) {
	needFFmpeg(t)
	sine := testSignal(16000, 1, 1)
	wav16 := encode(t, sine, 16000, 1, "a.wav", "-c:a", "pcm_s16le")
	flacData := encode(t, sine, 16000, 1, "a.flac", "-c:a", "flac")
	mp3Data := encode(t, sine, 16000, 1, "a.mp3", "-c:a", "libmp3lame")
	vorbisData := encode(t, sine, 16000, 1, "a.ogg", "-c:a", "libvorbis")
	opusData := encode(t, sine, 16000, 1, "a.opus", "-c:a", "libopus")
	alaw := encode(t, sine, 8000, 1, "a.wav", "-c:a", "pcm_alaw")
	body := make([]byte, 400)

	cases := []struct {
		name   string
		data   []byte
		opts   Options
		want   error
		detail string // substring of the message
	}{
		{"empty", nil, Options{}, ErrNotAudio, "0 bytes"},
		{"text", []byte("hello, this is not audio at all"), Options{}, ErrNotAudio, "hello"},
		{"png", []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR"), Options{}, ErrNotAudio, "PNG"},
		{"frame syncs without frames", bytes.Repeat([]byte{0xff, 0xfb, 0x12, 0x34}, 100), Options{}, ErrNotAudio, ""},
		{"wav data chunk larger than the file", wavBytes(1, 1, 16000, 2, 16, 100000, body), Options{}, ErrTruncated, "declares 100000 bytes, the file holds 400"},
		{"wav cut in its header", wav16[:30], Options{}, ErrTruncated, "fmt chunk"},
		{"wav without data chunk", wav16[:36], Options{}, ErrTruncated, "before the data chunk"},
		{"wav cut mid-file", wav16[:len(wav16)/2], Options{}, ErrTruncated, "declares 32000 bytes"},
		{"wav block align lies", wavBytes(1, 2, 16000, 2, 16, 400, body), Options{}, ErrMalformed, "block align 2, but 2 channels of 16 bits need 4"},
		{"wav odd frame count", wavBytes(1, 1, 16000, 2, 16, 399, body), Options{}, ErrMalformed, "not a whole number"},
		{"wav zero channels", wavBytes(1, 0, 16000, 0, 16, 400, body), Options{}, ErrMalformed, "0 channels"},
		{"wav zero rate", wavBytes(1, 1, 0, 2, 16, 400, body), Options{}, ErrMalformed, "sample rate 0"},
		{"wav 12-bit", wavBytes(1, 1, 16000, 2, 12, 400, body), Options{}, ErrUnsupported, "12-bit integer PCM"},
		{"wav a-law", alaw, Options{}, ErrUnsupported, "A-law"},
		{"wav too long", wav16, Options{MaxDuration: 500 * time.Millisecond}, ErrTooLong, "1.0 s of audio, the limit is 500ms"},
		{"wav too many channels", wavBytes(1, 9, 16000, 18, 16, 36, body), Options{}, ErrTooLong, "9 channels"},
		{"wav rate too high", wavBytes(1, 1, 400000, 2, 16, 400, body), Options{}, ErrTooLong, "400000 Hz"},
		{"wav too many samples", wav16, Options{MaxSamples: 15999}, ErrTooLong, "16000 frames of 1 channels, the limit is 15999 samples"},
		{"flac too many samples", flacData, Options{MaxSamples: 15999}, ErrTooLong, "the limit is 15999 samples"},
		{"opus too many samples", opusData, Options{MaxSamples: 1000}, ErrTooLong, "1000 samples"},
		{"too many bytes", wav16, Options{MaxBytes: 1000}, ErrTooLarge, "1000"},
		{"flac cut mid-stream", flacData[:len(flacData)/2], Options{}, ErrTruncated, ""},
		{"flac cut in its header", flacData[:20], Options{}, ErrTruncated, ""},
		{"flac too long", flacData, Options{MaxDuration: 500 * time.Millisecond}, ErrTooLong, "limit is 500ms"},
		{"mp3 too long", mp3Data, Options{MaxDuration: 500 * time.Millisecond}, ErrTooLong, "limit is 500ms"},
		{"vorbis cut mid-stream", vorbisData[:len(vorbisData)*2/3], Options{}, ErrTruncated, ""},
		{"vorbis too long", vorbisData, Options{MaxDuration: 500 * time.Millisecond}, ErrTooLong, "limit is 500ms"},
		{"opus with ffmpeg disabled", opusData, Options{FFmpeg: "off"}, ErrNoFFmpeg, "ogg/opus needs ffmpeg"},
		{"opus with ffmpeg missing", opusData, Options{FFmpeg: "/nonexistent/ffmpeg"}, ErrNoFFmpeg, "ogg/opus needs ffmpeg"},
		{"opus too long", opusData, Options{MaxDuration: 500 * time.Millisecond}, ErrTooLong, "500ms"},
		{"opus garbage after the header", append(append([]byte(nil), opusData[:200]...), bytes.Repeat([]byte{7}, 500)...), Options{}, ErrMalformed, "ffprobe"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(context.Background(), bytes.NewReader(c.data), c.opts)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err %T is not an *audio.Error", err)
			}
			if !strings.Contains(err.Error(), c.detail) {
				t.Fatalf("err = %q, want it to mention %q", err, c.detail)
			}
		})
	}
}

// TestDecodeSniffsBytesNotNames: what decides the decoder is the bytes;
// an MP3 behind an ID3 tag is found, and the same bytes under any name
// decode the same (Decode never sees a name).
func TestDecodeSniffsBytesNotNames(t *testing.T) {
	x := testSignal(16000, 1, 0.5)
	mp3Tagged := encode(t, x, 16000, 1, "a.wav", "-f", "mp3", "-c:a", "libmp3lame", "-metadata", "title=not a wav", "-id3v2_version", "3")
	if !bytes.HasPrefix(mp3Tagged, []byte("ID3")) {
		t.Fatalf("expected an ID3v2 tag, got % x", mp3Tagged[:4])
	}
	if got := Sniff(mp3Tagged); got != FormatMP3 {
		t.Fatalf("Sniff = %q, want mp3", got)
	}
	sig, err := Decode(context.Background(), bytes.NewReader(mp3Tagged), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sig.Rate != 16000 || sig.Frames() < 8000 {
		t.Fatalf("got %d Hz, %d frames", sig.Rate, sig.Frames())
	}
}

func TestDecodeStopsOnContext(t *testing.T) {
	x := testSignal(16000, 1, 2)
	for _, file := range []string{"a.wav", "a.flac", "a.mp3", "a.ogg", "a.opus"} {
		data := encode(t, x, 16000, 1, file)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := Decode(ctx, bytes.NewReader(data), Options{}); !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: err = %v, want context.Canceled", file, err)
		}
	}
}

// TestDecodeWAVPlainFloat: IEEE float with the plain (non-extensible) tag
// 3, as many tools write it, in both widths, and unsigned 8-bit's midpoint.
func TestDecodeWAVPlainFloat(t *testing.T) {
	want := []float64{0, 0.5, -0.25, 1.5, -1}
	var b32, b64 bytes.Buffer
	for _, v := range want {
		binary.Write(&b32, binary.LittleEndian, float32(v))
		binary.Write(&b64, binary.LittleEndian, v)
	}
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"float32", wavBytes(3, 1, 8000, 4, 32, uint32(b32.Len()), b32.Bytes())},
		{"float64", wavBytes(3, 1, 8000, 8, 64, uint32(b64.Len()), b64.Bytes())},
		{"u8", wavBytes(1, 1, 8000, 1, 8, 5, []byte{128, 192, 96, 255, 0})},
	} {
		sig, err := Decode(context.Background(), bytes.NewReader(c.data), Options{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		w := want
		if c.name == "u8" {
			w = []float64{0, 0.5, -0.25, 127.0 / 128, -1}
		}
		if d := maxDiff64(sig.Samples, w); d != 0 {
			t.Fatalf("%s: got %v, want %v", c.name, sig.Samples, w)
		}
	}
}

// TestMono16k: a stereo 44.1 kHz file whose channels hold the same tone at
// opposite signs plus a shared tone comes out as the shared tone alone at
// 16 kHz (downmix first, then resample).
func TestMono16k(t *testing.T) {
	const rate = 44100
	n := rate
	sig := Signal{Rate: rate, Channels: 2, Samples: make([]float32, 2*n)}
	for i := range n {
		tt := float64(i) / rate
		shared := 0.4 * math.Sin(2*math.Pi*440*tt)
		anti := 0.4 * math.Sin(2*math.Pi*1000*tt)
		sig.Samples[2*i], sig.Samples[2*i+1] = float32(shared+anti), float32(shared-anti)
	}
	y, err := Mono16k(context.Background(), sig)
	if err != nil {
		t.Fatal(err)
	}
	if len(y) != 16000 {
		t.Fatalf("%d samples, want 16000", len(y))
	}
	for i := 200; i < len(y)-200; i++ {
		want := 0.4 * math.Sin(2*math.Pi*440*float64(i)/16000)
		if d := math.Abs(float64(y[i]) - want); d > 1e-6 {
			t.Fatalf("sample %d: %g, want %g", i, y[i], want)
		}
	}
}

// TestDecodeWAVLayouts: WAVs as real tools leave them. ffmpeg writing to a
// pipe cannot seek back to fill in sizes and leaves 0xFFFFFFFF ("to the
// end"); chunks of odd size are followed by a pad byte.
func TestDecodeWAVLayouts(t *testing.T) {
	ff := needFFmpeg(t)
	cmd := exec.Command(ff, "-nostdin", "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "sine=f=440:d=0.5",
		"-ar", "16000", "-f", "wav", "pipe:1")
	piped, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if le32(piped[4:]) != math.MaxUint32 {
		t.Fatalf("expected ffmpeg to leave the RIFF size unknown, got %d", le32(piped[4:]))
	}
	sig, err := Decode(context.Background(), bytes.NewReader(piped), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sig.Frames() != 8000 || maxDiff(sig.Samples, ffmpegDecode(t, piped, 1)) != 0 {
		t.Fatalf("piped WAV: %d frames (want 8000) or samples differ from ffmpeg's", sig.Frames())
	}

	var b bytes.Buffer
	b.WriteString("RIFF\x00\x00\x00\x00WAVE")
	b.WriteString("junk\x03\x00\x00\x00abc\x00") // odd size, padded
	fmtc := wavBytes(1, 1, 8000, 2, 16, 4, []byte{0x00, 0x40, 0x00, 0xc0})[12:]
	b.Write(fmtc)
	sig, err = Decode(context.Background(), bytes.NewReader(b.Bytes()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sig.Samples) != 2 || sig.Samples[0] != 0.5 || sig.Samples[1] != -0.5 {
		t.Fatalf("odd chunk: got %v", sig.Samples)
	}
}
