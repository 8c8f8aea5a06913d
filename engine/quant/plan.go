package quant

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"fusion/engine/tensor"
)

// Width is one way a mixed plan may store a tensor: MLX affine codes of
// Bits in groups of GroupSize.
type Width struct {
	Bits      int `json:"bits"`
	GroupSize int `json:"group_size"`
}

func (w Width) String() string { return strconv.Itoa(w.Bits) + "/" + strconv.Itoa(w.GroupSize) }

// costBits is what a tensor of n weights costs at w with scales and
// biases of dt, in bits: n codes of w.Bits plus a scale and a bias per
// group. Exact (n is a multiple of the group size).
func (w Width) costBits(n int64, dt tensor.DType) int64 {
	return n*int64(w.Bits) + 2*(n/int64(w.GroupSize))*int64(8*dt.BlockBytes())
}

// BitsPerWeight is the true cost of a weight stored at w with scales and
// biases of dt: w.Bits + 2 × (bits of dt) / w.GroupSize — 4.5 for 4-bit
// in groups of 64 with bf16 scales, as mlx-lm counts it.
func (w Width) BitsPerWeight(dt tensor.DType) float64 {
	return float64(w.Bits) + 2*float64(8*dt.BlockBytes())/float64(w.GroupSize)
}

// Candidate is one width measured on one tensor: the mean squared error
// of its dequantized weights and, calibrated, the mean KL divergence
// (nats per token) of the model's predictions from the source's when
// this tensor alone is stored at the width.
type Candidate struct {
	Width
	BitsPerWeight float64 `json:"bits_per_weight"`
	MSE           float64 `json:"mse"`
	KL            float64 `json:"kl,omitempty"`
	// Estimated: KL was not measured at this width but scaled from the
	// base width's by the ratio of the weight errors (KL ≈ MSE × the
	// tensor's sensitivity, which holds while the errors are small).
	Estimated bool `json:"kl_estimated,omitempty"`
}

// Sensitivity is how much one tensor's quantization hurts at each width
// a plan may give it (Candidates, cheapest first). BaseMSE/BaseKL are the
// figures at the base width (Options.Bits and GroupSize), HighMSE/HighKL
// at HighBits in the base group size when that width was measured.
type Sensitivity struct {
	Name    string  `json:"name"`
	Weights int64   `json:"weights"`
	BaseMSE float64 `json:"base_mse"`
	HighMSE float64 `json:"high_mse"`
	// Calibrated: the KL figures were measured, and decide the plan.
	Calibrated bool        `json:"calibrated,omitempty"`
	BaseKL     float64     `json:"base_kl,omitempty"`
	HighKL     float64     `json:"high_kl,omitempty"`
	Candidates []Candidate `json:"candidates,omitempty"`
}

// cost is what the plan minimises for a tensor stored as c: the KL
// divergence when calibrated (each tensor's measured alone, summed over
// tensors), else the total squared error of its weights.
func (s Sensitivity) cost(c Candidate) float64 {
	if s.Calibrated {
		return c.KL
	}
	return c.MSE * float64(s.Weights)
}

func (s Sensitivity) String() string {
	if s.Calibrated {
		return fmt.Sprintf("KL %.3g at base → %.3g at high, %d weights", s.BaseKL, s.HighKL, s.Weights)
	}
	return fmt.Sprintf("MSE %.3g at base → %.3g at high, %d weights", s.BaseMSE, s.HighMSE, s.Weights)
}

// quantMSE is the mean squared error of v quantized and dequantized.
func quantMSE(v, d []float32) float64 {
	var sum float64
	for i, x := range v {
		e := float64(x - d[i])
		sum += e * e
	}
	return sum / float64(len(v))
}

// widths are the candidate widths of a mixed plan: every width of
// o.Widths (default Bits and HighBits) in every group size of
// o.GroupSizes (default GroupSize), and always the base width (Bits in
// GroupSize), which calibration measures and the others scale from.
func (o Options) widths() []Width {
	bits := o.Widths
	if len(bits) == 0 {
		bits = []int{o.Bits, o.HighBits}
	}
	groups := o.GroupSizes
	if len(groups) == 0 {
		groups = []int{o.GroupSize}
	}
	ws := []Width{{o.Bits, o.GroupSize}}
	for _, b := range bits {
		for _, g := range groups {
			if w := (Width{b, g}); !slices.Contains(ws, w) {
				ws = append(ws, w)
			}
		}
	}
	return ws
}

// sensitivities measures every quantizable tensor at every candidate
// width whose group size divides its rows: its own error, and with
// o.Calibration the model's divergence on that text (see calibrator),
// the overlay made beside the destination in parent and removed after.
func (s *source) sensitivities(ctx context.Context, src, parent string, o Options, progress func()) ([]Sensitivity, error) {
	var cal *calibrator
	if o.Calibration != "" {
		var err error
		if cal, err = newCalibrator(ctx, s, src, parent, o); err != nil {
			return nil, err
		}
		defer cal.close()
	}
	base, high := Width{o.Bits, o.GroupSize}, Width{o.HighBits, o.GroupSize}
	var sens []Sensitivity
	for _, name := range s.names {
		if err := ctx.Err(); err != nil {
			return nil, context.Cause(ctx)
		}
		if !s.quantOK[name] {
			progress()
			continue
		}
		t, v, err := s.floats(name)
		if err != nil {
			return nil, err
		}
		rows, cols := int(t.Shape[0]), int(t.Shape[1])
		st := Sensitivity{Name: name, Weights: int64(len(v)), Calibrated: cal != nil}
		baseAt := -1
		ds := map[Width][]float32{}
		for _, w := range o.widths() {
			if cols%w.GroupSize != 0 && w != base {
				continue
			}
			d, err := fakeQuant(v, rows, cols, w.GroupSize, w.Bits, s.dtype)
			if err != nil {
				return nil, fmt.Errorf("quant: %s: %w", name, err)
			}
			if w == base {
				baseAt = len(st.Candidates)
			}
			ds[w] = d
			st.Candidates = append(st.Candidates, Candidate{Width: w, BitsPerWeight: w.BitsPerWeight(s.dtype), MSE: quantMSE(v, d)})
		}
		if cal != nil {
			// The base width is always measured; the others too with
			// MeasureEveryWidth, else scaled from it by their weight error.
			b := &st.Candidates[baseAt]
			if b.KL, err = cal.kl(ctx, name, t.Shape, ds[base]); err != nil {
				return nil, fmt.Errorf("quant: calibrating %s: %w", name, err)
			}
			for i := range st.Candidates {
				c := &st.Candidates[i]
				switch {
				case i == baseAt:
				case o.MeasureEveryWidth:
					if c.KL, err = cal.kl(ctx, name, t.Shape, ds[c.Width]); err != nil {
						return nil, fmt.Errorf("quant: calibrating %s: %w", name, err)
					}
				default:
					c.Estimated = true
					if b.MSE > 0 {
						c.KL = st.Candidates[baseAt].KL * c.MSE / b.MSE
					}
				}
			}
		}
		for _, c := range st.Candidates {
			switch c.Width {
			case base:
				st.BaseMSE, st.BaseKL = c.MSE, c.KL
			case high:
				st.HighMSE, st.HighKL = c.MSE, c.KL
			}
		}
		slices.SortStableFunc(st.Candidates, func(a, b Candidate) int {
			if a.BitsPerWeight != b.BitsPerWeight {
				return cmpFloat(a.BitsPerWeight, b.BitsPerWeight)
			}
			return a.Bits - b.Bits
		})
		sens = append(sens, st)
		progress()
	}
	return sens, nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
