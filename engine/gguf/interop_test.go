package gguf

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// pyMeta is one metadata entry as gguf_interop.py reports it.
type pyMeta struct {
	Type  string  `json:"type"`
	Elem  *string `json:"elem"`
	Value any     `json:"value"`
}

type pyDump struct {
	Header     map[string]json.Number `json:"header"`
	Alignment  int                    `json:"alignment"`
	DataOffset int64                  `json:"data_offset"`
	Meta       map[string]pyMeta      `json:"meta"`
	Tensors    []struct {
		Name       string  `json:"name"`
		Type       string  `json:"type"`
		Dims       []int64 `json:"dims"`
		Shape      []int64 `json:"shape"`
		NBytes     int64   `json:"n_bytes"`
		DataOffset int64   `json:"data_offset"`
		SHA256     string  `json:"sha256"`
	} `json:"tensors"`
}

func decodePy(t *testing.T, out []byte) pyDump {
	t.Helper()
	var d pyDump
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("decoding %s: %v", out, err)
	}
	return d
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// sameValue reports whether our scalar or flat array v equals the JSON
// value j (decoded with UseNumber) exactly.
func sameValue(v Value, j any) error {
	if v.Type() == TypeArray {
		arr, ok := j.([]any)
		if !ok || len(arr) != v.Len() {
			return fmt.Errorf("array of %d, python has %v", v.Len(), j)
		}
		rv := reflect.ValueOf(v.Any())
		for i := range arr {
			if err := sameScalar(rv.Index(i).Interface(), arr[i]); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
		return nil
	}
	return sameScalar(v.Any(), j)
}

func sameScalar(x any, j any) error {
	var ours string
	switch n := x.(type) {
	case string:
		if s, ok := j.(string); ok && s == n {
			return nil
		}
		return fmt.Errorf("%q vs %v", n, j)
	case bool:
		if b, ok := j.(bool); ok && b == n {
			return nil
		}
		return fmt.Errorf("%v vs %v", n, j)
	case float32:
		num, ok := j.(json.Number)
		f, err := strconv.ParseFloat(string(num), 64)
		// float32(f): the writer's manifest states the double it was given.
		if !ok || err != nil || float32(f) != n {
			return fmt.Errorf("%v vs %v", n, j)
		}
		return nil
	case float64:
		num, ok := j.(json.Number)
		f, err := strconv.ParseFloat(string(num), 64)
		if !ok || err != nil || f != n {
			return fmt.Errorf("%v vs %v", n, j)
		}
		return nil
	default:
		ours = fmt.Sprint(x)
	}
	if num, ok := j.(json.Number); !ok || string(num) != ours {
		return fmt.Errorf("%s vs %v", ours, j)
	}
	return nil
}

// TestPythonReadsOurFile writes a file with our writer and reads it with
// gguf.GGUFReader: header, alignment, every metadata value and type, and
// every tensor's type, dims, offset and bytes must agree.
func TestPythonReadsOurFile(t *testing.T) {
	meta := append(sampleMeta(t), KV{KeyAlignment, Uint32(64)})
	tensors := sampleTensors(rand.New(rand.NewPCG(15, 16)))
	path := filepath.Join(t.TempDir(), "ours.gguf")
	if err := WriteFile(path, meta, tensors); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path, LoadRead)
	if err != nil {
		t.Fatal(err)
	}
	py := decodePy(t, runPython(t, "gguf_interop.py", "dump", path))
	if py.Header["GGUF.version"] != "3" || py.Header["GGUF.tensor_count"] != json.Number(strconv.Itoa(len(tensors))) ||
		py.Header["GGUF.kv_count"] != json.Number(strconv.Itoa(len(meta))) {
		t.Errorf("python header %v", py.Header)
	}
	if py.Alignment != 64 || py.DataOffset != f.DataOffset {
		t.Errorf("python: alignment %d data offset %d; ours %d %d", py.Alignment, py.DataOffset, f.Alignment, f.DataOffset)
	}
	if len(py.Meta) != len(meta) {
		t.Errorf("python read %d keys, we wrote %d", len(py.Meta), len(meta))
	}
	for _, kv := range meta {
		got, ok := py.Meta[kv.Key]
		if !ok {
			t.Errorf("%s: missing in python", kv.Key)
			continue
		}
		if got.Type != strings.ToUpper(kv.Value.Type().String()) {
			t.Errorf("%s: python type %s, ours %s", kv.Key, got.Type, kv.Value.Type())
		}
		if kv.Value.Type() == TypeArray && kv.Value.Len() > 0 {
			if got.Elem == nil || *got.Elem != strings.ToUpper(kv.Value.ElemType().String()) {
				t.Errorf("%s: python element type %v, ours %s", kv.Key, got.Elem, kv.Value.ElemType())
			}
		}
		if kv.Value.ElemType() == TypeArray && kv.Value.Type() == TypeArray {
			continue // GGUFReader flattens nested arrays; that it parsed past them is the check
		}
		if err := sameValue(kv.Value, got.Value); err != nil {
			t.Errorf("%s: %v", kv.Key, err)
		}
	}
	if len(py.Tensors) != len(tensors) {
		t.Fatalf("python read %d tensors, we wrote %d", len(py.Tensors), len(tensors))
	}
	for i, wt := range tensors {
		pt := py.Tensors[i]
		ours := f.Tensors[i]
		dims := make([]int64, len(wt.Shape))
		for j, d := range wt.Shape {
			dims[len(dims)-1-j] = d
		}
		wantOffset, _ := f.TensorOffset(ours.Name)
		if pt.Name != wt.Name || pt.Type != wt.DType.String() || !reflect.DeepEqual(pt.Dims, dims) ||
			pt.NBytes != int64(len(wt.Data)) || pt.SHA256 != sha(wt.Data) || pt.DataOffset != wantOffset {
			t.Errorf("tensor %d: python %+v; ours %s %v dims %v %d bytes at %d", i, pt, wt.Name, wt.DType, dims, len(wt.Data), wantOffset)
		}
	}
}

// TestWeReadPythonFile reads a file written by gguf.GGUFWriter: metadata
// order, types and values, and tensor types, shapes and bytes.
func TestWeReadPythonFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "py.gguf")
	out := runPython(t, "gguf_interop.py", "write", path)
	var want struct {
		Meta    map[string]pyMeta `json:"meta"`
		Tensors []struct {
			Name   string  `json:"name"`
			Type   string  `json:"type"`
			Shape  []int64 `json:"shape"`
			SHA256 string  `json:"sha256"`
		} `json:"tensors"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&want); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []LoadMode{LoadRead, LoadMmap} {
		f, err := Open(path, mode)
		if err != nil {
			t.Fatalf("%v: %v", mode, err)
		}
		if f.Alignment != 64 {
			t.Errorf("alignment %d, want 64", f.Alignment)
		}
		if len(f.KV) != len(want.Meta) {
			t.Errorf("%d keys, python wrote %d", len(f.KV), len(want.Meta))
		}
		for _, kv := range f.KV {
			w, ok := want.Meta[kv.Key]
			if !ok {
				t.Errorf("unexpected key %s", kv.Key)
				continue
			}
			if w.Type != strings.ToUpper(kv.Value.Type().String()) ||
				(w.Elem != nil && *w.Elem != strings.ToUpper(kv.Value.ElemType().String())) {
				t.Errorf("%s: type %s/%s, python wrote %s/%v", kv.Key, kv.Value.Type(), kv.Value.ElemType(), w.Type, w.Elem)
			}
			if arrs, ok := kv.Value.AsArrays(); ok {
				// [[1, 2], [3]] of int32
				if len(arrs) != 2 || fmt.Sprint(arrs[0].Any(), arrs[1].Any()) != "[1 2] [3]" || arrs[0].ElemType() != TypeInt32 {
					t.Errorf("%s: nested array read as %v", kv.Key, arrs)
				}
				continue
			}
			if err := sameValue(kv.Value, w.Value); err != nil {
				t.Errorf("%s: %v", kv.Key, err)
			}
		}
		if f.KV[0].Key != KeyArchitecture || f.Architecture() != "qwen3" {
			t.Errorf("first key %s, architecture %q", f.KV[0].Key, f.Architecture())
		}
		if len(f.Tensors) != len(want.Tensors) {
			t.Fatalf("%d tensors, python wrote %d", len(f.Tensors), len(want.Tensors))
		}
		for i, wt := range want.Tensors {
			got := f.Tensors[i]
			if got.Name != wt.Name || got.DType.String() != wt.Type || !reflect.DeepEqual(got.Shape, wt.Shape) || sha(got.Data) != wt.SHA256 {
				t.Errorf("tensor %d: %s %v %v, python wrote %+v", i, got.Name, got.DType, got.Shape, wt)
			}
		}
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	}
}
