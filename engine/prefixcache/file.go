package prefixcache

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// The block file: a fixed header, then the data.
//
//	off  size
//	0    8   magic "FSNKVBLK"
//	8    2   version (1)
//	10   2   reserved (0)
//	12   4   tokens in the block
//	16   32  key
//	48   32  model key
//	80   8   data length
//	88   4   CRC-32C of the data
//	92   4   CRC-32C of bytes 0…91
//	96       data
const (
	fileMagic   = "FSNKVBLK"
	fileVersion = 1
	headerSize  = 96
	fileExt     = ".kvb"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt marks a block file that fails its checks.
var ErrCorrupt = errors.New("prefixcache: corrupt block file")

// header is the parsed header of a block file.
type header struct {
	tokens  uint32
	key     Key
	model   Key
	dataLen uint64
	dataCRC uint32
}

func (h *header) marshal() []byte {
	b := make([]byte, headerSize)
	copy(b, fileMagic)
	binary.LittleEndian.PutUint16(b[8:], fileVersion)
	binary.LittleEndian.PutUint32(b[12:], h.tokens)
	copy(b[16:48], h.key[:])
	copy(b[48:80], h.model[:])
	binary.LittleEndian.PutUint64(b[80:], h.dataLen)
	binary.LittleEndian.PutUint32(b[88:], h.dataCRC)
	binary.LittleEndian.PutUint32(b[92:], crc32.Checksum(b[:92], castagnoli))
	return b
}

func parseHeader(b []byte) (header, error) {
	var h header
	if len(b) < headerSize {
		return h, fmt.Errorf("%w: %d bytes, shorter than the header", ErrCorrupt, len(b))
	}
	if string(b[:8]) != fileMagic {
		return h, fmt.Errorf("%w: bad magic", ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint16(b[8:]); v != fileVersion {
		return h, fmt.Errorf("%w: version %d, want %d", ErrCorrupt, v, fileVersion)
	}
	if crc32.Checksum(b[:92], castagnoli) != binary.LittleEndian.Uint32(b[92:]) {
		return h, fmt.Errorf("%w: header checksum", ErrCorrupt)
	}
	h.tokens = binary.LittleEndian.Uint32(b[12:])
	copy(h.key[:], b[16:48])
	copy(h.model[:], b[48:80])
	h.dataLen = binary.LittleEndian.Uint64(b[80:])
	h.dataCRC = binary.LittleEndian.Uint32(b[88:])
	return h, nil
}

// blockPath is where the block of key lives under dir.
func blockPath(dir string, k Key) string {
	s := k.String()
	return filepath.Join(dir, s[:2], s+fileExt)
}

// keyOfPath parses the key from a block file's name.
func keyOfPath(path string) (Key, bool) {
	var k Key
	name := filepath.Base(path)
	if !strings.HasSuffix(name, fileExt) {
		return k, false
	}
	s := strings.TrimSuffix(name, fileExt)
	if len(s) != 2*len(k) {
		return k, false
	}
	if _, err := hex.Decode(k[:], []byte(s)); err != nil {
		return k, false
	}
	return k, k.String() == s
}

// writeBlock writes the file's bytes: header then data.
func writeBlock(w io.Writer, h header, data []byte) error {
	if _, err := w.Write(h.marshal()); err != nil {
		return err
	}
	_, err := w.Write(data)
	return err
}

// readBlock reads and checks the block file of key; the data returned is
// the file's data part. A missing file is os.ErrNotExist, a bad one
// ErrCorrupt.
func readBlock(path string, key Key) (header, []byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return header{}, nil, err
	}
	h, err := parseHeader(b)
	if err != nil {
		return h, nil, err
	}
	if h.key != key {
		return h, nil, fmt.Errorf("%w: holds key %s", ErrCorrupt, h.key)
	}
	if uint64(len(b)-headerSize) != h.dataLen {
		return h, nil, fmt.Errorf("%w: %d data bytes, header says %d", ErrCorrupt, len(b)-headerSize, h.dataLen)
	}
	data := b[headerSize:]
	if crc32.Checksum(data, castagnoli) != h.dataCRC {
		return h, nil, fmt.Errorf("%w: data checksum", ErrCorrupt)
	}
	return h, data, nil
}

// statBlock checks what can be checked without reading the data: the
// header, and the file's size against it.
func statBlock(path string, key Key) (header, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return header{}, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return header{}, 0, err
	}
	buf := make([]byte, headerSize)
	if _, err := io.ReadFull(f, buf); err != nil {
		return header{}, 0, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	h, err := parseHeader(buf)
	if err != nil {
		return h, 0, err
	}
	if !bytes.Equal(h.key[:], key[:]) {
		return h, 0, fmt.Errorf("%w: holds key %s", ErrCorrupt, h.key)
	}
	if uint64(st.Size()) != headerSize+h.dataLen {
		return h, 0, fmt.Errorf("%w: %d bytes, header says %d", ErrCorrupt, st.Size(), headerSize+h.dataLen)
	}
	return h, st.Size(), nil
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
