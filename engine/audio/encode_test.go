package audio

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strings"
	"testing"
)

// speechPCM is seconds of the test signal at 22.05 kHz (Piper's rate)
// as 16-bit samples.
func speechPCM(seconds float64) []int16 {
	x := testSignal(22050, 1, seconds)
	pcm := make([]int16, len(x))
	for i, v := range x {
		pcm[i] = int16(math.Round(v * 32767))
	}
	return pcm
}

// encodeChunks encodes pcm in pieces of uneven sizes (as sentences come).
func encodeChunks(t *testing.T, format string, pcm []int16, opts EncodeOptions) []byte {
	t.Helper()
	var b bytes.Buffer
	e, err := NewEncoder(context.Background(), &b, format, 22050, opts)
	if err != nil {
		t.Fatal(err)
	}
	for from, size := 0, 1000; from < len(pcm); from, size = from+size, size*2+333 {
		if err := e.Write(pcm[from:min(len(pcm), from+size)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestFLACEncoderLossless encodes in uneven pieces and wants ffmpeg's
// decode (libavcodec's FLAC decoder) and ours to give back exactly the
// samples, at the rate. (0.45 s: two whole blocks and a short last one;
// the bit writer is slow under -race.)
func TestFLACEncoderLossless(t *testing.T) {
	pcm := speechPCM(0.45)
	data := encodeChunks(t, "flac", pcm, EncodeOptions{})
	if string(data[:4]) != "fLaC" {
		t.Fatalf("no FLAC signature: % x", data[:4])
	}
	t.Logf("%d samples → %d bytes of FLAC (%.0f%% of 16-bit PCM)", len(pcm), len(data), 100*float64(len(data))/float64(2*len(pcm)))
	ref := ffmpegDecode(t, data, 1)
	sig, err := DecodeBytes(context.Background(), data, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ref) != len(pcm) || len(sig.Samples) != len(pcm) || sig.Rate != 22050 {
		t.Fatalf("decoded %d (ffmpeg) and %d (ours, %d Hz) samples, encoded %d", len(ref), len(sig.Samples), sig.Rate, len(pcm))
	}
	for i, s := range pcm {
		if int16(math.Round(float64(ref[i])*32768)) != s || int16(math.Round(float64(sig.Samples[i])*32768)) != s {
			t.Fatalf("sample %d: ffmpeg %v, ours %v, encoded %d", i, ref[i]*32768, sig.Samples[i]*32768, s)
		}
	}
}

// TestFFmpegEncoders encodes mp3, opus and aac through ffmpeg and decodes
// them back: the right container, the length within the codecs' padding,
// the loudness within 20%.
func TestFFmpegEncoders(t *testing.T) {
	needFFmpeg(t)
	pcm := speechPCM(1.3)
	seconds := float64(len(pcm)) / 22050
	for _, c := range []struct {
		format, magic string
		at            int // the magic's offset
	}{
		{"mp3", "", 0},
		{"opus", "OggS", 0},
		{"aac", "\xff", 0},
	} {
		t.Run(c.format, func(t *testing.T) {
			data := encodeChunks(t, c.format, pcm, EncodeOptions{})
			if !strings.HasPrefix(string(data[c.at:]), c.magic) {
				t.Fatalf("starts % x", data[:min(8, len(data))])
			}
			sig, err := DecodeBytes(context.Background(), data, Options{})
			if err != nil {
				t.Fatal(err)
			}
			got := float64(sig.Frames()) / float64(sig.Rate)
			t.Logf("%s: %d bytes, %d Hz, %.3f s (sent %.3f s)", c.format, len(data), sig.Rate, got, seconds)
			if math.Abs(got-seconds) > 0.1 {
				t.Errorf("%.3f s decoded, sent %.3f s", got, seconds)
			}
			// The loudness survives (a piped mp3 has no gapless header, so
			// its decoder delay shifts the samples: no sample comparison).
			rms := func(x []float64) float64 {
				var sum float64
				for _, v := range x {
					sum += v * v
				}
				return math.Sqrt(sum / float64(len(x)))
			}
			in, out := make([]float64, len(pcm)), make([]float64, len(sig.Samples))
			for i, s := range pcm {
				in[i] = float64(s) / 32768
			}
			for i, v := range sig.Samples {
				out[i] = float64(v)
			}
			if r := rms(out) / rms(in); r < 0.8 || r > 1.2 {
				t.Errorf("RMS ratio %.3f after the round trip", r)
			}
		})
	}
}

// TestEncoderErrors: an unknown format, and an ffmpeg format without
// ffmpeg, whose error names it.
func TestEncoderErrors(t *testing.T) {
	if err := CheckEncoder("ogg", EncodeOptions{}); !errors.Is(err, ErrFormat) {
		t.Errorf("ogg: %v", err)
	}
	for _, ff := range []string{"off", "/nonexistent/ffmpeg"} {
		err := CheckEncoder("mp3", EncodeOptions{FFmpeg: ff})
		if !errors.Is(err, ErrNoFFmpeg) || !strings.Contains(err.Error(), "encoding mp3 needs ffmpeg") {
			t.Errorf("mp3 with ffmpeg %q: %v", ff, err)
		}
		if _, err := NewEncoder(context.Background(), &bytes.Buffer{}, "mp3", 22050, EncodeOptions{FFmpeg: ff}); !errors.Is(err, ErrNoFFmpeg) {
			t.Errorf("NewEncoder mp3 with ffmpeg %q: %v", ff, err)
		}
	}
	for _, f := range []string{"flac", "wav", "pcm"} {
		if err := CheckEncoder(f, EncodeOptions{FFmpeg: "off"}); err != nil {
			t.Errorf("%s without ffmpeg: %v", f, err)
		}
	}
}
