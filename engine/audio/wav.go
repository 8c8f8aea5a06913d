package audio

import (
	"context"
	"encoding/binary"
	"math"
)

// WAV format tags (the fmt chunk's wFormatTag, or the first two bytes of
// an extensible format's SubFormat GUID).
const (
	wavPCM        = 0x0001
	wavFloat      = 0x0003
	wavExtensible = 0xfffe
)

// wavGUIDTail is the KSDATAFORMAT_SUBTYPE_* GUID after its first two bytes
// (the format tag), as stored in the file.
var wavGUIDTail = [14]byte{0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xaa, 0x00, 0x38, 0x9b, 0x71}

// wavCodecNames names the format tags we refuse, for the error message.
var wavCodecNames = map[uint16]string{
	0x0002: "Microsoft ADPCM",
	0x0006: "A-law",
	0x0007: "mu-law",
	0x0011: "IMA ADPCM",
	0x0031: "GSM 6.10",
	0x0050: "MPEG",
	0x0055: "MPEG layer III",
}

type wavFormat struct {
	tag        uint16 // wavPCM or wavFloat after resolving extensible
	channels   int
	rate       int
	blockAlign int
	bits       int // container bits per sample
}

// decodeWAV parses RIFF/WAVE: chunks are walked in order, the fmt chunk
// must come before data, every chunk must fit in the file (a data chunk of
// 0xFFFFFFFF bytes, as streaming writers leave it, means "to the end").
func decodeWAV(ctx context.Context, data []byte, opts Options) (Signal, error) {
	const f = FormatWAV
	var (
		format *wavFormat
		pos    = 12
	)
	for {
		if pos+8 > len(data) {
			if format == nil {
				return Signal{}, errorf(f, ErrTruncated, "file ends at byte %d before a fmt chunk", len(data))
			}
			return Signal{}, errorf(f, ErrTruncated, "file ends at byte %d before the data chunk", len(data))
		}
		id := string(data[pos : pos+4])
		size := int64(le32(data[pos+4:]))
		body := pos + 8
		switch id {
		case "fmt ":
			if size > int64(len(data)-body) {
				return Signal{}, errorf(f, ErrTruncated, "fmt chunk of %d bytes, %d left in the file", size, len(data)-body)
			}
			fm, err := parseWAVFormat(data[body : body+int(size)])
			if err != nil {
				return Signal{}, err
			}
			if err := opts.checkFormat(f, fm.rate, fm.channels, -1); err != nil {
				return Signal{}, err
			}
			format = fm
		case "data":
			if format == nil {
				return Signal{}, errorf(f, ErrMalformed, "data chunk before the fmt chunk")
			}
			left := int64(len(data) - body)
			if size == math.MaxUint32 {
				size = left - left%int64(format.blockAlign)
			}
			if size > left {
				return Signal{}, errorf(f, ErrTruncated, "data chunk declares %d bytes, the file holds %d", size, left)
			}
			if size%int64(format.blockAlign) != 0 {
				return Signal{}, errorf(f, ErrMalformed, "data chunk of %d bytes is not a whole number of %d-byte frames", size, format.blockAlign)
			}
			frames := size / int64(format.blockAlign)
			if err := opts.checkFrames(f, format.rate, format.channels, frames); err != nil {
				return Signal{}, err
			}
			return convertPCM(ctx, data[body:body+int(size)], format)
		default:
			if size > int64(len(data)-body) {
				return Signal{}, errorf(f, ErrTruncated, "%q chunk of %d bytes, %d left in the file", id, size, len(data)-body)
			}
		}
		pos = body + int(size) + int(size&1) // chunks are padded to even sizes
	}
}

func parseWAVFormat(b []byte) (*wavFormat, error) {
	const f = FormatWAV
	if len(b) < 16 {
		return nil, errorf(f, ErrMalformed, "fmt chunk of %d bytes, at least 16 needed", len(b))
	}
	fm := &wavFormat{
		tag:        le16(b),
		channels:   int(le16(b[2:])),
		rate:       int(le32(b[4:])),
		blockAlign: int(le16(b[12:])),
		bits:       int(le16(b[14:])),
	}
	if fm.tag == wavExtensible {
		if len(b) < 40 || le16(b[16:]) < 22 {
			return nil, errorf(f, ErrMalformed, "WAVE_FORMAT_EXTENSIBLE with a %d-byte fmt chunk, 40 needed", len(b))
		}
		valid := int(le16(b[18:]))
		if valid > fm.bits {
			return nil, errorf(f, ErrMalformed, "%d valid bits in a %d-bit container", valid, fm.bits)
		}
		if [14]byte(b[26:40]) != wavGUIDTail {
			return nil, errorf(f, ErrUnsupported, "WAVE_FORMAT_EXTENSIBLE with sub-format GUID % x", b[24:40])
		}
		fm.tag = le16(b[24:])
	}
	switch fm.tag {
	case wavPCM:
		if fm.bits != 8 && fm.bits != 16 && fm.bits != 24 && fm.bits != 32 {
			return nil, errorf(f, ErrUnsupported, "%d-bit integer PCM (8, 16, 24 and 32 are supported)", fm.bits)
		}
	case wavFloat:
		if fm.bits != 32 && fm.bits != 64 {
			return nil, errorf(f, ErrUnsupported, "%d-bit float PCM (32 and 64 are supported)", fm.bits)
		}
	default:
		name := wavCodecNames[fm.tag]
		if name == "" {
			name = "unknown codec"
		}
		return nil, errorf(f, ErrUnsupported, "WAV format tag 0x%04x (%s)", fm.tag, name)
	}
	if fm.channels == 0 {
		return nil, errorf(f, ErrMalformed, "0 channels")
	}
	if fm.blockAlign != fm.channels*fm.bits/8 {
		return nil, errorf(f, ErrMalformed, "block align %d, but %d channels of %d bits need %d",
			fm.blockAlign, fm.channels, fm.bits, fm.channels*fm.bits/8)
	}
	return fm, nil
}

// convertPCM scales raw frames to float32: unsigned 8-bit around 128,
// signed integers by 2^(bits-1), floats as they are.
func convertPCM(ctx context.Context, raw []byte, fm *wavFormat) (Signal, error) {
	width := fm.bits / 8
	n := len(raw) / width
	out := make([]float32, n)
	const chunk = 1 << 16
	for start := 0; start < n; start += chunk {
		if err := ctx.Err(); err != nil {
			return Signal{}, err
		}
		end := min(start+chunk, n)
		b := raw[start*width:]
		switch {
		case fm.tag == wavFloat && width == 4:
			for i := start; i < end; i++ {
				out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[(i-start)*4:]))
			}
		case fm.tag == wavFloat:
			for i := start; i < end; i++ {
				out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(b[(i-start)*8:])))
			}
		case width == 1:
			for i := start; i < end; i++ {
				out[i] = float32(int(b[i-start])-128) / 128
			}
		case width == 2:
			for i := start; i < end; i++ {
				out[i] = float32(int16(binary.LittleEndian.Uint16(b[(i-start)*2:]))) / (1 << 15)
			}
		case width == 3:
			for i := start; i < end; i++ {
				p := b[(i-start)*3:]
				v := int32(uint32(p[0])<<8|uint32(p[1])<<16|uint32(p[2])<<24) >> 8
				out[i] = float32(v) / (1 << 23)
			}
		default:
			for i := start; i < end; i++ {
				out[i] = float32(float64(int32(binary.LittleEndian.Uint32(b[(i-start)*4:]))) / (1 << 31))
			}
		}
	}
	return Signal{Rate: fm.rate, Channels: fm.channels, Samples: out}, nil
}
