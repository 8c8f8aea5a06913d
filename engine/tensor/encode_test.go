package tensor

import (
	"math"
	"testing"
)

// TestEncode: Encode is Floats' inverse for F32 and rounds to the nearest
// representable value (ties to even) for BF16 and F16.
func TestEncode(t *testing.T) {
	vals := []float32{0, -0.5, 1, 3.14159265, -65504, 1e-3, 1.00390625, 1.005859375}
	for _, tc := range []struct {
		dt    DType
		round func(float32) float32
	}{
		{F32, func(f float32) float32 { return f }},
		{BF16, func(f float32) float32 { return BF16ToF32(F32ToBF16(f)) }},
		{F16, func(f float32) float32 { return F16ToF32(F32ToF16(f)) }},
	} {
		b := Encode(tc.dt, vals)
		if want := len(vals) * int(tc.dt.BlockBytes()); len(b) != want {
			t.Fatalf("%v: %d bytes, want %d", tc.dt, len(b), want)
		}
		got, err := Floats(Tensor{Name: "x", DType: tc.dt, Data: b})
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			if math.Float32bits(got[i]) != math.Float32bits(tc.round(v)) {
				t.Errorf("%v: %g came back as %g, want %g", tc.dt, v, got[i], tc.round(v))
			}
		}
	}
	// The BF16 tie 1 + 2⁻⁸ rounds to even (1).
	if got := BF16ToF32(F32ToBF16(1.00390625)); got != 1 {
		t.Errorf("bf16(1+2⁻⁸) = %g, want 1", got)
	}
}
