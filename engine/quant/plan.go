package quant

import (
	"context"
	"fmt"
	"sort"
)

// Sensitivity is how much one tensor's quantization hurts at the base
// precision and at the high one: the mean squared error of its
// dequantized weights, per weight, and with a calibration text the mean
// KL divergence (nats per token) of the model's predictions from the
// source's when this tensor alone is quantized.
type Sensitivity struct {
	Name    string  `json:"name"`
	Weights int64   `json:"weights"`
	BaseMSE float64 `json:"base_mse"`
	HighMSE float64 `json:"high_mse"`
	// Calibrated: BaseKL and HighKL were measured, and order the raises.
	Calibrated bool    `json:"calibrated,omitempty"`
	BaseKL     float64 `json:"base_kl,omitempty"`
	HighKL     float64 `json:"high_kl,omitempty"`
}

// Gain is the error removed per weight by raising the tensor (every
// weight raised costs the same extra bits, so this orders the raises):
// the KL divergence removed per weight when calibrated, else the squared
// error removed per weight.
func (s Sensitivity) Gain() float64 {
	if s.Calibrated {
		return (s.BaseKL - s.HighKL) / float64(s.Weights)
	}
	return s.BaseMSE - s.HighMSE
}

func (s Sensitivity) String() string {
	if s.Calibrated {
		return fmt.Sprintf("KL %.3g → %.3g, %d weights", s.BaseKL, s.HighKL, s.Weights)
	}
	return fmt.Sprintf("MSE %.3g → %.3g, %d weights", s.BaseMSE, s.HighMSE, s.Weights)
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

// sensitivities measures every quantizable tensor at Bits and HighBits:
// its own error, and with o.Calibration the model's divergence on that
// text (see calibrator), the overlay made beside the destination in
// parent and removed after.
func (s *source) sensitivities(ctx context.Context, src, parent string, o Options, progress func()) ([]Sensitivity, error) {
	var cal *calibrator
	if o.Calibration != "" {
		var err error
		if cal, err = newCalibrator(ctx, s, src, parent, o); err != nil {
			return nil, err
		}
		defer cal.close()
	}
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
		for _, b := range []struct {
			bits    int
			mse, kl *float64
		}{{o.Bits, &st.BaseMSE, &st.BaseKL}, {o.HighBits, &st.HighMSE, &st.HighKL}} {
			d, err := fakeQuant(v, rows, cols, o.GroupSize, b.bits, s.dtype)
			if err != nil {
				return nil, fmt.Errorf("quant: %s: %w", name, err)
			}
			*b.mse = quantMSE(v, d)
			if cal != nil {
				if *b.kl, err = cal.kl(ctx, name, t.Shape, d); err != nil {
					return nil, fmt.Errorf("quant: calibrating %s: %w", name, err)
				}
			}
		}
		sens = append(sens, st)
		progress()
	}
	return sens, nil
}

// allocate gives each tensor its bits: the base bits, then HighBits for
// the tensors of largest gain while the average code bits per quantized
// weight stays within o.TargetBits (greedy: a tensor too large for what
// is left of the budget is passed over for smaller ones).
func allocate(sens []Sensitivity, o Options) map[string]int {
	bits := make(map[string]int, len(sens))
	var total int64
	for _, s := range sens {
		bits[s.Name] = o.Bits
		total += s.Weights
	}
	order := append([]Sensitivity(nil), sens...)
	sort.SliceStable(order, func(i, j int) bool {
		if order[i].Gain() != order[j].Gain() {
			return order[i].Gain() > order[j].Gain()
		}
		return order[i].Name < order[j].Name
	})
	budget := (o.TargetBits - float64(o.Bits)) * float64(total)
	step := float64(o.HighBits - o.Bits)
	for _, s := range order {
		cost := step * float64(s.Weights)
		if cost <= budget && s.Gain() > 0 {
			bits[s.Name] = o.HighBits
			budget -= cost
		}
	}
	return bits
}
