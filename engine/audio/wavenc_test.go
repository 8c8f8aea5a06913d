package audio

import (
	"bytes"
	"context"
	"testing"
)

// TestWAVWriterRoundTrip writes a mono 16-bit file and reads it back with
// Decode: same rate, channel count and samples (s/32768).
func TestWAVWriterRoundTrip(t *testing.T) {
	pcm := []int16{0, 1, -1, 32767, -32768, 1234, -4321}
	var b bytes.Buffer
	if err := WriteWAVHeader(&b, 22050, len(pcm)); err != nil {
		t.Fatal(err)
	}
	if err := WritePCM16(&b, pcm); err != nil {
		t.Fatal(err)
	}
	if b.Len() != WAVHeaderSize+2*len(pcm) {
		t.Fatalf("%d bytes", b.Len())
	}
	sig, err := DecodeBytes(context.Background(), b.Bytes(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sig.Rate != 22050 || sig.Channels != 1 || len(sig.Samples) != len(pcm) {
		t.Fatalf("decoded %d Hz, %d channels, %d samples", sig.Rate, sig.Channels, len(sig.Samples))
	}
	for i, s := range pcm {
		if want := float32(s) / 32768; sig.Samples[i] != want {
			t.Errorf("sample %d: %v, want %v", i, sig.Samples[i], want)
		}
	}
	for _, bad := range []struct{ rate, frames int }{{0, 1}, {-5, 1}, {8000, 1 << 31}} {
		if err := WriteWAVHeader(&bytes.Buffer{}, bad.rate, bad.frames); err == nil {
			t.Errorf("header for rate %d, %d frames accepted", bad.rate, bad.frames)
		}
	}
}
