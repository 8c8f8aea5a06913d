package rnnoise

import (
	"encoding/binary"
	"errors"
	"testing"

	"fusion/engine/tensor"
)

// record builds one blob record.
func record(name string, typ, size, block int32, data []byte) []byte {
	h := make([]byte, headSize)
	copy(h, "DNNw")
	binary.LittleEndian.PutUint32(h[8:], uint32(typ))
	binary.LittleEndian.PutUint32(h[12:], uint32(size))
	binary.LittleEndian.PutUint32(h[16:], uint32(block))
	copy(h[20:], name)
	return append(h, data...)
}

func TestReadBlob(t *testing.T) {
	good := record("a_bias", TypeFloat, 8, 64, make([]byte, 64))
	two := append(append([]byte{}, good...), record("b_weights_idx", TypeInt, 4, 64, make([]byte, 64))...)
	badMagic := append([]byte{}, good...)
	copy(badMagic, "XXXX")
	noName := record("", TypeFloat, 8, 64, make([]byte, 64))
	longName := record("", TypeFloat, 8, 64, make([]byte, 64))
	for i := 20; i < headSize; i++ {
		longName[i] = 'x'
	}
	for _, c := range []struct {
		name  string
		blob  []byte
		names []string // nil: an error
	}{
		{"one record", good, []string{"a_bias"}},
		{"two records", two, []string{"a_bias", "b_weights_idx"}},
		{"empty", nil, nil},
		{"bad magic", badMagic, nil},
		{"truncated header", good[:40], nil},
		{"truncated data", good[:100], nil},
		{"no name", noName, nil},
		{"unterminated name", longName, nil},
		{"bad type", record("x", 7, 8, 64, make([]byte, 64)), nil},
		{"block smaller than size", record("x", TypeFloat, 128, 64, make([]byte, 64)), nil},
		{"block not a multiple of 64", record("x", TypeFloat, 8, 60, make([]byte, 60)), nil},
		{"negative size", record("x", TypeFloat, -4, 64, make([]byte, 64)), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			arrays, err := ReadBlob(c.blob)
			if c.names == nil {
				if !errors.Is(err, ErrNotRNNoise) {
					t.Fatalf("got %v, want ErrNotRNNoise", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(arrays) != len(c.names) {
				t.Fatalf("%d arrays, want %d", len(arrays), len(c.names))
			}
			for i, a := range arrays {
				if a.Name != c.names[i] {
					t.Errorf("array %d is %q, want %q", i, a.Name, c.names[i])
				}
			}
			if len(arrays[0].Data) != 8 {
				t.Errorf("data of %d bytes, want 8", len(arrays[0].Data))
			}
		})
	}
}

// TestSparseLayout checks the 8×4 block expansion on a small matrix: 16
// outputs, 8 inputs, the first row block with both input blocks, the
// second with only the second one.
func TestSparseLayout(t *testing.T) {
	const in, out = 8, 16
	idx := []int32{2, 0, 4, 1, 4}
	var src []float32
	want := make([]float32, out*in)
	blocks := [][2]int{{0, 0}, {0, 4}, {8, 4}} // (row, first input)
	for b, rc := range blocks {
		for c := range 4 {
			for r := range 8 {
				v := float32(b*100 + c*10 + r)
				src = append(src, v)
				want[(rc[0]+r)*in+rc[1]+c] = v
			}
		}
	}
	byName := map[string]Array{
		"l_weights_idx":   {Name: "l_weights_idx", Type: TypeInt, Data: i32Bytes(idx)},
		"l_weights_float": {Name: "l_weights_float", Type: TypeFloat, Data: tensor.Encode(tensor.F32, src)},
	}
	got := make([]float32, out*in)
	if err := sparseWeights(byName, "l", got, in, out); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("w[%d][%d] = %g, want %g", i/in, i%in, got[i], want[i])
		}
	}
	// An index past the inputs is refused.
	byName["l_weights_idx"] = Array{Name: "l_weights_idx", Type: TypeInt, Data: i32Bytes([]int32{2, 0, 6, 1, 4})}
	if err := sparseWeights(byName, "l", got, in, out); !errors.Is(err, ErrNotRNNoise) {
		t.Fatalf("got %v, want ErrNotRNNoise", err)
	}
}

func i32Bytes(x []int32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return b
}
