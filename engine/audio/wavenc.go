package audio

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// WAVHeaderSize is the size of the header WriteWAVHeader writes.
const WAVHeaderSize = 44

// WriteWAVHeader writes the 44-byte header of a mono 16-bit PCM WAV file
// of frames samples at rate. frames < 0 writes the "unknown length" sizes
// (0xFFFFFFFF) streaming encoders use when the length is not known yet.
func WriteWAVHeader(w io.Writer, rate, frames int) error {
	if rate <= 0 || rate > math.MaxInt32/2 {
		return fmt.Errorf("audio: WAV sample rate %d", rate)
	}
	data, riff := uint32(math.MaxUint32), uint32(math.MaxUint32)
	if frames >= 0 {
		if int64(frames)*2 > math.MaxUint32-36 {
			return fmt.Errorf("audio: %d frames do not fit a WAV file", frames)
		}
		data = uint32(frames * 2)
		riff = 36 + data
	}
	var h [WAVHeaderSize]byte
	copy(h[0:], "RIFF")
	binary.LittleEndian.PutUint32(h[4:], riff)
	copy(h[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(h[16:], 16)
	binary.LittleEndian.PutUint16(h[20:], 1) // PCM
	binary.LittleEndian.PutUint16(h[22:], 1) // mono
	binary.LittleEndian.PutUint32(h[24:], uint32(rate))
	binary.LittleEndian.PutUint32(h[28:], uint32(rate*2))
	binary.LittleEndian.PutUint16(h[32:], 2)
	binary.LittleEndian.PutUint16(h[34:], 16)
	copy(h[36:], "data")
	binary.LittleEndian.PutUint32(h[40:], data)
	_, err := w.Write(h[:])
	return err
}

// WritePCM16 writes samples as little-endian 16-bit PCM.
func WritePCM16(w io.Writer, samples []int16) error {
	b := make([]byte, 2*len(samples))
	for i, s := range samples {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(s))
	}
	_, err := w.Write(b)
	return err
}
