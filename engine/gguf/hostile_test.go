package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"testing"
)

// hb builds raw GGUF bytes for malformed-header tests.
type hb struct{ bytes.Buffer }

func (b *hb) u8(v uint8) *hb   { b.WriteByte(v); return b }
func (b *hb) u32(v uint32) *hb { b.Write(binary.LittleEndian.AppendUint32(nil, v)); return b }
func (b *hb) u64(v uint64) *hb { b.Write(binary.LittleEndian.AppendUint64(nil, v)); return b }
func (b *hb) str(s string) *hb { b.u64(uint64(len(s))); b.WriteString(s); return b }

// head starts a v3 file with the given counts.
func head(tensors, kvs uint64) *hb {
	b := &hb{}
	b.WriteString("GGUF")
	return b.u32(3).u64(tensors).u64(kvs)
}

// ti appends a tensor info.
func (b *hb) ti(name string, typ uint32, offset uint64, dims ...uint64) *hb {
	b.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		b.u64(d)
	}
	return b.u32(typ).u64(offset)
}

// data pads to 32 bytes and appends n zero bytes of tensor data.
func (b *hb) data(n int) []byte {
	for b.Len()%32 != 0 {
		b.WriteByte(0)
	}
	b.Write(make([]byte, n))
	return b.Bytes()
}

func TestHostileHeaders(t *testing.T) {
	const f32, q4_0, iq2xxs = 0, 2, 16
	tests := []struct {
		name  string
		data  []byte
		want  string // substring of the error
		unsup bool   // ErrUnsupported rather than ErrInvalid
	}{
		{"empty", nil, "magic: need 4 bytes", false},
		{"bad magic", []byte("GGML\x03\x00\x00\x00"), "bad magic", false},
		{"version 1", append([]byte("GGUF"), 1, 0, 0, 0), "version 1", true},
		{"version 4", append([]byte("GGUF"), 4, 0, 0, 0), "unknown version 4", false},
		{"big-endian", append([]byte("GGUF"), 0, 0, 0, 3), "big-endian", true},
		{"truncated counts", append([]byte("GGUF"), 3, 0, 0, 0, 1), "tensor count: need 8 bytes", false},
		{"tensor count over cap", head(1<<40, 0).Bytes(), "tensor count 1099511627776 exceeds the limit", false},
		{"tensor count past end", head(1000, 0).data(64), "tensor count 1000 cannot fit", false},
		{"kv count over cap", head(0, 1<<20).Bytes(), "metadata count 1048576 exceeds the limit", false},
		{"kv count past end", head(0, 50).data(0), "metadata count 50 cannot fit", false},
		{"key length over cap", head(0, 1).u64(1 << 62).data(64), "key length 4611686018427387904 exceeds", false},
		{"key length past end", head(0, 1).u64(500).data(64), "key length 500 cannot fit", false},
		{"empty key", head(0, 1).str("").u32(uint32(TypeUint8)).u8(1).data(0), "empty key", false},
		{"duplicate key", head(0, 2).str("a").u32(0).u8(1).str("a").u32(0).u8(2).data(0), `duplicate metadata key "a"`, false},
		{"unknown value type", head(0, 1).str("a").u32(13).u8(1).data(0), "unknown value type 13", false},
		{"bool not 0 or 1", head(0, 1).str("a").u32(uint32(TypeBool)).u8(2).data(0), "bool byte is 2", false},
		{"string over cap", head(0, 1).str("a").u32(uint32(TypeString)).u64(1 << 40).data(0), "string length 1099511627776 exceeds", false},
		{"string past end", head(0, 1).str("a").u32(uint32(TypeString)).u64(4096).data(0), "string length 4096 cannot fit", false},
		{"array over cap", head(0, 1).str("a").u32(uint32(TypeArray)).u32(uint32(TypeUint8)).u64(1 << 40).data(0), "array length 1099511627776 exceeds", false},
		{"array past end", head(0, 1).str("a").u32(uint32(TypeArray)).u32(uint32(TypeUint64)).u64(100).data(64), "array length 100 cannot fit", false},
		{"string array past end", head(0, 1).str("a").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(10).data(64), "array length 10 cannot fit", false},
		{"array of unknown type", head(0, 1).str("a").u32(uint32(TypeArray)).u32(77).u64(1).data(8), "unknown array element type 77", false},
		{"arrays nested too deep", nestedArrays(maxNesting + 1), "nested deeper than 8", false},
		{"alignment wrong type", head(0, 1).str(KeyAlignment).u32(uint32(TypeUint64)).u64(32).data(0), "general.alignment is uint64", false},
		{"alignment zero", head(0, 1).str(KeyAlignment).u32(uint32(TypeUint32)).u32(0).data(0), "not a power of two", false},
		{"alignment 48", head(0, 1).str(KeyAlignment).u32(uint32(TypeUint32)).u32(48).data(0), "not a power of two", false},
		{"empty tensor name", head(1, 0).ti("", f32, 0, 4).data(16), "empty tensor name", false},
		{"tensor name over cap", head(1, 0).ti(strings.Repeat("x", 2000), f32, 0, 4).data(16), "tensor name length 2000 exceeds", false},
		{"five dimensions", head(1, 0).ti("t", f32, 0, 1, 1, 1, 1, 1).data(4), "5 dimensions", false},
		{"unknown ggml type", head(1, 0).ti("t", 99, 0, 4).data(16), "unknown ggml type 99", false},
		{"unsupported ggml type", head(1, 0).ti("t", iq2xxs, 0, 256).data(66), "IQ2_XXS", true},
		{"row not whole blocks", head(1, 0).ti("t", q4_0, 0, 16, 2).data(18), "row of 16 elements is not a multiple of the Q4_0 block size 32", false},
		{"shape overflow", head(1, 0).ti("t", f32, 0, 1<<40, 1<<40).data(16), "overflows", false},
		{"dimension too large", head(1, 0).ti("t", f32, 0, 1<<63).data(16), "dimension 0 is", false},
		{"byte size overflow", head(1, 0).ti("t", f32, 0, 1<<62).data(16), "overflows", false},
		{"offset not aligned", head(1, 0).ti("t", f32, 4, 4).data(64), "offset 4 is not a multiple of the alignment 32", false},
		{"data past end", head(1, 0).ti("t", f32, 0, 8).data(16), "runs past the end of the file", false},
		{"offset past end", head(1, 0).ti("t", f32, 1<<40, 1).data(16), "runs past the end of the file", false},
		{"offset wraps", head(1, 0).ti("t", f32, ^uint64(31), 16).data(16), "runs past the end of the file", false},
		{"overlap", head(2, 0).ti("a", f32, 0, 16).ti("b", f32, 32, 16).data(128), `tensors "a" and "b" overlap`, false},
		{"duplicate tensor", head(2, 0).ti("a", f32, 0, 4).ti("a", f32, 32, 4).data(64), `duplicate tensor name "a"`, false},
		{"truncated tensor info", head(1, 0).str("a-long-tensor-name").u32(2).u64(4).Bytes(), "dimension: need 8 bytes", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("hostile.gguf", tc.data)
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "hostile.gguf") {
				t.Errorf("error %q does not contain %q and the file name", err, tc.want)
			}
			sentinel := ErrInvalid
			if tc.unsup {
				sentinel = ErrUnsupported
			}
			if !errors.Is(err, sentinel) {
				t.Errorf("error %q does not wrap %v", err, sentinel)
			}
		})
	}
}

func nestedArrays(depth int) []byte {
	b := head(0, 1).str("a").u32(uint32(TypeArray))
	for range depth - 1 {
		b.u32(uint32(TypeArray)).u64(1)
	}
	b.u32(uint32(TypeUint8)).u64(0)
	return b.data(0)
}

func TestNestingWithinLimitIsAccepted(t *testing.T) {
	f, err := Parse("nested", nestedArrays(maxNesting))
	if err != nil {
		t.Fatal(err)
	}
	if f.Meta("a").ElemType() != TypeArray {
		t.Errorf("nested array read as %v", f.Meta("a").ElemType())
	}
}

func TestVersion2IsAccepted(t *testing.T) {
	data := writeSample(t, sampleMeta(t), nil)
	data[4] = 2
	f, err := Parse("v2", data)
	if err != nil || f.Version != 2 {
		t.Fatalf("v2: %v", err)
	}
}

// TestHostileCountsDoNotAllocate checks that counts declared by a tiny
// file are refused before anything is allocated for them.
func TestHostileCountsDoNotAllocate(t *testing.T) {
	files := [][]byte{
		head(maxTensorCount, maxKVCount).data(64),
		head(0, 1).str("a").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(maxArrayLen).data(64),
		head(0, 1).str("a").u32(uint32(TypeArray)).u32(uint32(TypeArray)).u64(maxArrayLen).data(64),
		head(0, 1).str("a").u32(uint32(TypeString)).u64(maxStringLen).data(64),
	}
	for i, data := range files {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if _, err := Parse("hostile", data); err == nil {
			t.Fatalf("file %d: no error", i)
		}
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
			t.Errorf("file %d: parsing %d hostile bytes allocated %d bytes", i, len(data), n)
		}
	}
}
