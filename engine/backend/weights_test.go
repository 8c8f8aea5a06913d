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

// TestConvData checks the [out, in, kernel] → [out, kernel·in] transpose
// on an F16 weight (element of 2 bytes) and the view for a kernel of 1,
// and refuses a weight that is not rank 3.
func TestConvData(t *testing.T) {
	const out, in, kernel = 2, 3, 4
	w := tensor.Tensor{DType: tensor.F16, Shape: []int64{out, in, kernel}, Data: seqBytes(2 * out * in * kernel)}
	d, err := ConvData("conv", w, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Out != out || d.In != kernel*in || d.Data.Shape[1] != kernel*in {
		t.Fatalf("shape %d×%d %v", d.Out, d.In, d.Data.Shape)
	}
	for o := range out {
		for c := range in {
			for j := range kernel {
				src := ((o*in+c)*kernel + j) * 2
				dst := ((o*kernel+j)*in + c) * 2
				if !bytes.Equal(d.Data.Data[dst:dst+2], w.Data[src:src+2]) {
					t.Fatalf("element (%d, %d, %d) moved wrong", o, c, j)
				}
			}
		}
	}
	one := tensor.Tensor{DType: tensor.F32, Shape: []int64{2, 3, 1}, Data: seqBytes(24)}
	if d, err := ConvData("proj", one, nil); err != nil || d.In != 3 || &d.Data.Data[0] != &one.Data[0] {
		t.Errorf("kernel 1: %+v, %v; want a view [2, 3]", d, err)
	}
	if _, err := ConvData("bad", tensor.Tensor{DType: tensor.F32, Shape: []int64{2, 3}, Data: seqBytes(24)}, nil); err == nil {
		t.Error("rank-2 weight accepted")
	}
}
