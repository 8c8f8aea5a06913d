package prefixcache

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzReadBlock: any bytes in a block file are either a good block (whose
// data has the header's length) or an error; never a panic.
func FuzzReadBlock(f *testing.F) {
	k := ModelKey("fuzz")
	data := []byte("0123456789abcdef")
	h := header{tokens: 4, key: k, model: k, dataLen: uint64(len(data)), dataCRC: crc32c(data)}
	f.Add(append(h.marshal(), data...))
	f.Add(h.marshal())
	f.Add([]byte(fileMagic))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "x"+fileExt)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		hd, got, err := readBlock(path, k)
		if err == nil && uint64(len(got)) != hd.dataLen {
			t.Fatalf("a good block of %d bytes, header says %d", len(got), hd.dataLen)
		}
		if _, size, err := statBlock(path, k); err == nil && size != int64(len(b)) {
			t.Fatalf("statBlock size %d of a %d-byte file", size, len(b))
		}
	})
}
