package gguf

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"fusion/engine/tensor"
)

// TestMXFP4MLXLayout: ggml MXFP4 blocks moved into MLX's mxfp4 layout
// decode, by the OCP formula E2M1(code)·2^(scale−127), to the values ggml
// gives (TestDequantizeMatchesGGUFPackage checks those against
// gguf.quants), and move back byte for byte; a scale byte of 255, NaN for
// MLX, is refused; lengths that are not whole blocks are refused.
func TestMXFP4MLXLayout(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	const rows, cols = 8, 256
	raw := randomBlocks(r, tensor.MXFP4, rows, cols)
	for b := 0; b < len(raw); b += mxfp4BlockBytes {
		if raw[b] == 0xff {
			raw[b] = 0xfe
		}
	}
	raw[0], raw[mxfp4BlockBytes] = 0, 1 // the subnormal scales
	want := make([]float32, rows*cols)
	if err := DequantizeRow(tensor.MXFP4, raw, want); err != nil {
		t.Fatal(err)
	}
	codes, scales, err := MXFP4ToMLX(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(codes) != rows*cols/2 || len(scales) != rows*cols/32 {
		t.Fatalf("%d code bytes and %d scales for %d values", len(codes), len(scales), rows*cols)
	}
	for i, w := range want {
		code := codes[i/2] >> (4 * (i % 2)) & 15
		// == compares −0 (E2M1 code 8) equal to ggml's +0.
		if got := tensor.E2M1ToF32(code) * tensor.E8M0ToF32(scales[i/32]); got != w {
			t.Fatalf("element %d: MLX layout gives %v (code %d, scale %d), ggml %v", i, got, code, scales[i/32], w)
		}
	}
	back, err := MXFP4FromMLX(codes, scales)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, raw) {
		t.Error("MXFP4FromMLX(MXFP4ToMLX(x)) != x")
	}

	bad := bytes.Clone(raw)
	bad[2*mxfp4BlockBytes] = 0xff
	if _, _, err := MXFP4ToMLX(bad); err == nil {
		t.Error("a scale byte of 255 was accepted")
	}
	if _, _, err := MXFP4ToMLX(raw[:len(raw)-1]); err == nil {
		t.Error("a partial block was accepted")
	}
	if _, err := MXFP4FromMLX(codes[:len(codes)-1], scales); err == nil {
		t.Error("codes short of their scales were accepted")
	}
}
