package audio

import (
	"context"
	"errors"
	"testing"
)

// FuzzDecode: any bytes decode or fail with an *Error (or the context's
// error), never a panic, and a success is a well-formed Signal. ffmpeg is
// off, so the fuzzer exercises our parsing and the Go decoders.
func FuzzDecode(f *testing.F) {
	f.Add(wavBytes(1, 1, 16000, 2, 16, 4, []byte{1, 2, 3, 4}))
	f.Add(wavBytes(0xfffe, 2, 8000, 4, 16, 4, []byte{1, 2, 3, 4}))
	f.Add([]byte("fLaC\x00\x00\x00\x22"))
	f.Add([]byte("OggS\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x1e\x01vorbis"))
	f.Add([]byte("ID3\x03\x00\x00\x00\x00\x00\x00\xff\xfb\x90\x00"))
	f.Add([]byte{0xff, 0xfb, 0x90, 0x64, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		sig, err := DecodeBytes(context.Background(), data, Options{FFmpeg: "off", MaxDuration: 10e9})
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T is not an *audio.Error: %v", err, err)
			}
			return
		}
		if sig.Rate <= 0 || sig.Channels <= 0 || len(sig.Samples)%sig.Channels != 0 || sig.Frames() == 0 {
			t.Fatalf("bad signal: %d Hz, %d ch, %d samples", sig.Rate, sig.Channels, len(sig.Samples))
		}
	})
}
