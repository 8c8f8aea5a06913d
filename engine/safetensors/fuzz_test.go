package safetensors

import (
	"bytes"
	"errors"
	"runtime/metrics"
	"slices"
	"testing"

	"fusion/engine/tensor"
)

// FuzzSafetensorsHeader feeds arbitrary bytes as a whole file (FromBytes,
// which shares every check with Open). A file is either
// rejected with a *FormatError, or every tensor it exposes lies inside the
// file, has the size its dtype and shape require, overlaps no other, and
// survives a write/read round trip. Parsing never allocates much more than
// the input's size, whatever the header claims.
func FuzzSafetensorsHeader(f *testing.F) {
	var valid bytes.Buffer
	if err := Write(&valid, sampleTensors(), map[string]string{"format": "pt"}); err != nil {
		f.Fatal(err)
	}
	f.Add(valid.Bytes())
	f.Add(rawFile(`{}      `, 0))
	f.Add(rawFile(`{"__metadata__":{"format":"mlx"},"a":{"dtype":"U32","shape":[2,1],"data_offsets":[0,8]}}`, 8))
	f.Add(rawFile(`{"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]},"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, 6))
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,4]}}`, 4))
	f.Add(withLength(MaxHeaderSize, "{}"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		before := heapAllocs()
		file, err := FromBytes("fuzz", data)
		if alloc := heapAllocs() - before; alloc > 1<<20+64*uint64(len(data)) {
			t.Fatalf("parsing %d bytes allocated %d bytes", len(data), alloc)
		}
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FormatError", err)
			}
			return
		}
		ts := file.Tensors()
		type span struct{ lo, hi int }
		var spans []span
		for _, tn := range ts {
			n, err := tensor.NumElements(tn.Shape)
			if err != nil {
				t.Fatalf("%s: accepted bad shape %v", tn.Name, tn.Shape)
			}
			size, err := tn.DType.ByteSize(n)
			if err != nil || int64(len(tn.Data)) != size {
				t.Fatalf("%s: %d bytes for %v %v", tn.Name, len(tn.Data), tn.DType, tn.Shape)
			}
			if len(tn.Data) == 0 {
				continue
			}
			lo := offsetIn(data, tn.Data)
			if lo < 8 || lo+len(tn.Data) > len(data) {
				t.Fatalf("%s: data at %d is outside the file", tn.Name, lo)
			}
			spans = append(spans, span{lo, lo + len(tn.Data)})
		}
		slices.SortFunc(spans, func(a, b span) int { return a.lo - b.lo })
		for i := 1; i < len(spans); i++ {
			if spans[i].lo < spans[i-1].hi {
				t.Fatalf("accepted overlapping tensors %v", spans)
			}
		}
		var out bytes.Buffer
		if err := Write(&out, ts, file.Metadata()); err != nil {
			t.Fatalf("rewriting an accepted file: %v", err)
		}
		again, err := FromBytes("again", out.Bytes())
		if err != nil {
			t.Fatalf("reading a rewritten file: %v", err)
		}
		for _, tn := range ts {
			g, ok := again.Tensor(tn.Name)
			if !ok || g.DType != tn.DType || !slices.Equal(g.Shape, tn.Shape) || !bytes.Equal(g.Data, tn.Data) {
				t.Fatalf("%s changed in the round trip", tn.Name)
			}
		}
	})
}

// offsetIn returns the offset of sub within buf (sub must alias buf).
func offsetIn(buf, sub []byte) int {
	for i := range buf {
		if &buf[i] == &sub[0] {
			return i
		}
	}
	return -1
}

// heapAllocs returns the cumulative bytes allocated on the heap. Unlike
// runtime.ReadMemStats it does not stop the world (which crawls in a fuzz
// worker); small allocations are counted a span at a time, which is
// precise enough to catch a header-sized allocation.
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
