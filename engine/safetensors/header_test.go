package safetensors

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// rawFile builds a file from a literal header and n data bytes (0x01...).
func rawFile(hdr string, n int) []byte {
	b := make([]byte, 8, 8+len(hdr)+n)
	binary.LittleEndian.PutUint64(b, uint64(len(hdr)))
	b = append(b, hdr...)
	for i := 0; i < n; i++ {
		b = append(b, byte(i+1))
	}
	return b
}

func withLength(n uint64, rest string) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, n)
	return append(b, rest...)
}

func TestHostileHeaders(t *testing.T) {
	tests := []struct {
		name    string
		file    []byte
		want    error
		inMsg   string // substring the message must contain
		tensors int    // for valid files
	}{
		{"empty file", nil, ErrTruncated, "shorter than the 8-byte", 0},
		{"seven bytes", []byte{1, 2, 3, 4, 5, 6, 7}, ErrTruncated, "7 bytes", 0},
		{"length over cap", withLength(MaxHeaderSize+1, "{}"), ErrHeaderTooLarge, "exceeds the 104857600-byte limit", 0},
		{"length 2^63", withLength(1<<63, "{}"), ErrHeaderTooLarge, "", 0},
		{"length past end of file", withLength(64, "{}"), ErrTruncated, "header length 64 exceeds the 2 bytes", 0},
		{"not an object", rawFile(`[]      `, 0), ErrBadJSON, "does not start with '{'", 0},
		{"zero-length header", rawFile(``, 0), ErrBadJSON, "does not start with '{'", 0},
		{"unterminated JSON", rawFile(`{"a":{"dtype":"F32"`, 0), ErrBadJSON, `tensor "a"`, 0},
		{"missing closing brace", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}`, 4), ErrBadJSON, "", 0},
		{"trailing garbage", rawFile(`{} x`, 0), ErrBadJSON, "trailing data", 0},
		{"second object", rawFile(`{}{}`, 0), ErrBadJSON, "trailing data", 0},
		{"non-object tensor", rawFile(`{"a":5}`, 0), ErrBadJSON, `tensor "a"`, 0},
		{"unknown dtype", rawFile(`{"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}}`, 1), ErrBadDType, `"Q4"`, 0},
		{"fp8 unsupported", rawFile(`{"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}}`, 1), ErrBadDType, "F8_E4M3", 0},
		{"missing dtype", rawFile(`{"a":{"shape":[1],"data_offsets":[0,4]}}`, 4), ErrBadDType, `""`, 0},
		{"negative dim", rawFile(`{"a":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,4]}}`, 4), ErrBadShape, "negative dimension", 0},
		{"shape overflow", rawFile(`{"a":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,4]}}`, 4), ErrBadShape, "overflows", 0},
		{"byte size overflow", rawFile(`{"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,4]}}`, 4), ErrBadShape, "overflows", 0},
		{"missing shape", rawFile(`{"a":{"dtype":"F32","data_offsets":[0,4]}}`, 4), ErrBadShape, "missing shape", 0},
		{"fractional dim", rawFile(`{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, 4), ErrBadJSON, "", 0},
		{"huge dim literal", rawFile(`{"a":{"dtype":"F32","shape":[1e30],"data_offsets":[0,4]}}`, 4), ErrBadJSON, "", 0},
		{"missing offsets", rawFile(`{"a":{"dtype":"F32","shape":[1]}}`, 4), ErrBadOffsets, "found 0 values", 0},
		{"three offsets", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}`, 8), ErrBadOffsets, "found 3 values", 0},
		{"reversed offsets", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}`, 4), ErrBadOffsets, "[4, 0] is not a range", 0},
		{"negative offset", rawFile(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[-4,-4]}}`, 4), ErrBadOffsets, "not a range", 0},
		{"offsets past data", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 4), ErrBadOffsets, "ends past the 4-byte data section", 0},
		{"size mismatch", rawFile(`{"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}}`, 4), ErrSizeMismatch, "hold 4 bytes, BF16 [3] needs 6", 0},
		{"overlap listed out of order", rawFile(`{"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]},"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, 6), ErrOverlap, `overlaps "a"`, 0},
		{"identical ranges", rawFile(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"I16","shape":[1],"data_offsets":[0,2]}}`, 2), ErrOverlap, "", 0},
		{"duplicate name", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2), ErrDuplicate, `tensor "a"`, 0},
		{"metadata not strings", rawFile(`{"__metadata__":{"n":1}}`, 0), ErrBadMetadata, "", 0},
		{"metadata not a map", rawFile(`{"__metadata__":[1]}`, 0), ErrBadMetadata, "", 0},
		{"metadata twice", rawFile(`{"__metadata__":{},"__metadata__":{}}`, 0), ErrBadMetadata, "appears twice", 0},
		// Valid files: the rules above must not reject these.
		{"empty header", rawFile(`{}      `, 0), nil, "", 0},
		{"metadata null", rawFile(`{"__metadata__":null}`, 0), nil, "", 0},
		{"unsorted offsets, gap, unknown field", rawFile(`{"b":{"dtype":"U8","shape":[2],"data_offsets":[6,8],"x":1},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 8), nil, "", 2},
		{"scalar and empty tensors", rawFile(`{"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"e":{"dtype":"F32","shape":[0,3],"data_offsets":[2,2]},"f":{"dtype":"U8","shape":[0],"data_offsets":[4,4]}}`, 4), nil, "", 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := FromBytes("test.safetensors", tc.file)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if f.Len() != tc.tensors {
					t.Fatalf("got %d tensors, want %d", f.Len(), tc.tensors)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("error = %v, want %v", err, tc.want)
			}
			var fe *FormatError
			if !errors.As(err, &fe) || fe.File != "test.safetensors" {
				t.Fatalf("error %v is not a *FormatError naming the file", err)
			}
			if !strings.Contains(err.Error(), tc.inMsg) || !strings.Contains(err.Error(), "test.safetensors") {
				t.Fatalf("error %q does not mention %q and the file", err, tc.inMsg)
			}
		})
	}
}

// TestHostileHeadersFromDisk runs the length checks through Open in both
// modes, where the read path must reject before allocating a buffer.
func TestHostileHeadersFromDisk(t *testing.T) {
	dir := t.TempDir()
	files := map[string][]byte{
		"huge.safetensors":  withLength(MaxHeaderSize+1, "{}"),
		"short.safetensors": withLength(1<<20, "{}"),
		"tiny.safetensors":  {1, 2, 3},
		"bad.safetensors":   rawFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, 8),
	}
	want := map[string]error{
		"huge.safetensors":  ErrHeaderTooLarge,
		"short.safetensors": ErrTruncated,
		"tiny.safetensors":  ErrTruncated,
		"bad.safetensors":   ErrBadOffsets,
	}
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, mode := range []LoadMode{LoadRead, LoadMmap} {
			_, err := Open(path, mode)
			if !errors.Is(err, want[name]) {
				t.Errorf("%s (%v): error = %v, want %v", name, mode, err, want[name])
			}
		}
	}
	if _, err := Open(filepath.Join(dir, "missing.safetensors"), LoadRead); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: error = %v, want fs.ErrNotExist", err)
	}
	if _, err := Open(dir, LoadRead); err == nil {
		t.Error("opening a directory succeeded")
	}
}

// TestHostileHeaderAllocations checks that a header's claims never drive
// allocation: a 16-byte file claiming a 100 MB header, or a tensor of
// 2^40 elements, costs a few kilobytes to reject.
func TestHostileHeaderAllocations(t *testing.T) {
	inputs := [][]byte{
		withLength(MaxHeaderSize, "{}"),
		rawFile(`{"a":{"dtype":"F32","shape":[1099511627776],"data_offsets":[0,4398046511104]}}`, 4),
	}
	for i, in := range inputs {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range 10 {
			if _, err := FromBytes("x", in); err == nil {
				t.Fatalf("input %d accepted", i)
			}
		}
		runtime.ReadMemStats(&after)
		if per := (after.TotalAlloc - before.TotalAlloc) / 10; per > 64<<10 {
			t.Errorf("input %d: %d bytes allocated per rejection", i, per)
		}
	}
}
