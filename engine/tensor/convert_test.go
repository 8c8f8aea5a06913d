package tensor

import (
	"math"
	"testing"
)

func TestF16RoundTripAllPatterns(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			if g := F32ToF16(f); g&0x7c00 != 0x7c00 || g&0x3ff == 0 {
				t.Fatalf("NaN %#04x came back as %#04x", h, g)
			}
			continue
		}
		if g := F32ToF16(f); g != uint16(h) {
			t.Fatalf("F16 %#04x -> %v -> %#04x", h, f, g)
		}
	}
}

func TestF32ToF16Rounding(t *testing.T) {
	tests := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3c00},
		{-2, 0xc000},
		{65504, 0x7bff},
		{65520, 0x7c00},                  // rounds up to +Inf
		{float32(math.Inf(-1)), 0xfc00},  // -Inf
		{5.960464477539063e-08, 0x0001},  // smallest subnormal
		{2.9802322387695312e-08, 0x0000}, // exactly half of it: ties to even (0)
		{1.0009765625, 0x3c01},
		{1.00048828125, 0x3c00}, // halfway between 0x3c00 and 0x3c01: even
		{1.00146484375, 0x3c02}, // halfway between 0x3c01 and 0x3c02: even
	}
	for _, tc := range tests {
		if got := F32ToF16(tc.in); got != tc.want {
			t.Errorf("F32ToF16(%v) = %#04x, want %#04x", tc.in, got, tc.want)
		}
	}
}

func TestBF16(t *testing.T) {
	tests := []struct {
		in   float32
		want uint16
	}{
		{1.5, 0x3fc0},
		{-1, 0xbf80},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie, even stays
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie, odd rounds up
		{math.Float32frombits(0x3f808001), 0x3f81},
	}
	for _, tc := range tests {
		if got := F32ToBF16(tc.in); got != tc.want {
			t.Errorf("F32ToBF16(%v) = %#04x, want %#04x", tc.in, got, tc.want)
		}
		if back := BF16ToF32(tc.want); F32ToBF16(back) != tc.want {
			t.Errorf("BF16 %#04x does not round-trip", tc.want)
		}
	}
}

func TestByteSize(t *testing.T) {
	tests := []struct {
		d       DType
		n       int64
		want    int64
		wantErr bool
	}{
		{F32, 10, 40, false},
		{BF16, 3, 6, false},
		{Q8_0, 64, 68, false},
		{Q4_K, 512, 288, false},
		{Q6_K, 256, 210, false},
		{Q4_0, 33, 0, true},
		{F32, math.MaxInt64 / 2, 0, true},
		{Invalid, 1, 0, true},
	}
	for _, tc := range tests {
		got, err := tc.d.ByteSize(tc.n)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%v.ByteSize(%d) = %d, %v; want %d, err=%v", tc.d, tc.n, got, err, tc.want, tc.wantErr)
		}
	}
	if _, err := NumElements([]int64{1 << 40, 1 << 40}); err == nil {
		t.Error("NumElements did not report overflow")
	}
}
