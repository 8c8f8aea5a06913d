package backend

import (
	"bytes"
	"testing"

	"fusion/engine/tensor"
)

// seqBytes returns n bytes 0, 1, 2, ….
func seqBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func TestRowRange(t *testing.T) {
	bias := tensor.Tensor{Name: "b", DType: tensor.BF16, Shape: []int64{6}, Data: seqBytes(12)}
	dense := WeightData{Name: "qkv", Format: Dense, Out: 6, In: 4,
		Data: tensor.Tensor{Name: "w", DType: tensor.BF16, Shape: []int64{6, 4}, Data: seqBytes(48)}, Bias: &bias}
	affine := WeightData{Name: "gate_up", Format: MLXAffine, Out: 6, In: 64, Bits: 4, Group: 32,
		Data:   tensor.Tensor{Name: "w", DType: tensor.U32, Shape: []int64{6, 8}, Data: seqBytes(192)},
		Scales: tensor.Tensor{Name: "s", DType: tensor.BF16, Shape: []int64{6, 2}, Data: seqBytes(24)},
		Biases: tensor.Tensor{Name: "z", DType: tensor.BF16, Shape: []int64{6, 2}, Data: seqBytes(24)}}
	mxfp := WeightData{Name: "down", Format: MLXFloat, Mode: "mxfp4", Out: 6, In: 32,
		Data:   tensor.Tensor{Name: "w", DType: tensor.U32, Shape: []int64{6, 4}, Data: seqBytes(96)},
		Scales: tensor.Tensor{Name: "s", DType: tensor.U8, Shape: []int64{6, 1}, Data: seqBytes(6)}}
	tests := []struct {
		name     string
		w        WeightData
		from, to int
		check    func(t *testing.T, got WeightData)
	}{
		{"dense middle rows with bias", dense, 2, 5, func(t *testing.T, got WeightData) {
			if got.Out != 3 || got.In != 4 || !bytes.Equal(got.Data.Data, seqBytes(48)[16:40]) || got.Data.Shape[0] != 3 ||
				!bytes.Equal(got.Bias.Data, seqBytes(12)[4:10]) || got.Bias.Shape[0] != 3 {
				t.Errorf("got %+v bias %+v", got, got.Bias)
			}
		}},
		{"affine last rows", affine, 3, 6, func(t *testing.T, got WeightData) {
			if got.Out != 3 || !bytes.Equal(got.Data.Data, seqBytes(192)[96:]) || !bytes.Equal(got.Scales.Data, seqBytes(24)[12:]) ||
				!bytes.Equal(got.Biases.Data, seqBytes(24)[12:]) || got.Scales.Shape[1] != 2 || got.Bits != 4 || got.Group != 32 {
				t.Errorf("got %+v", got)
			}
		}},
		{"mxfp first row", mxfp, 0, 1, func(t *testing.T, got WeightData) {
			if got.Out != 1 || !bytes.Equal(got.Data.Data, seqBytes(96)[:16]) || !bytes.Equal(got.Scales.Data, seqBytes(6)[:1]) || got.Mode != "mxfp4" {
				t.Errorf("got %+v", got)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RowRange(tc.w, tc.from, tc.to)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, got)
		})
	}
	short := affine
	short.Scales.Data = seqBytes(20) // not 6 rows
	for _, bad := range []struct {
		name     string
		w        WeightData
		from, to int
	}{
		{"beyond the rows", dense, 4, 7}, {"empty", dense, 3, 3}, {"negative", dense, -1, 2}, {"scales not per row", short, 0, 3},
	} {
		if _, err := RowRange(bad.w, bad.from, bad.to); err == nil {
			t.Errorf("%s: no error", bad.name)
		}
	}
}
