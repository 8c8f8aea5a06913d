package quant

import (
	"context"
	"fmt"
	"sort"

	"fusion/engine/modelfile"
)

// Sensitivity is how much one tensor's quantization error drops when it
// gets the high precision instead of the base one: the mean squared
// error of its dequantized weights at each, per weight.
type Sensitivity struct {
	Name    string
	Weights int64
	BaseMSE float64
	HighMSE float64
}

// Gain is the error removed per weight by raising the tensor (every
// weight costs the same extra bits, so this orders the raises).
func (s Sensitivity) Gain() float64 { return s.BaseMSE - s.HighMSE }

// quantMSE is the mean squared error of v quantized and dequantized.
func quantMSE(v []float32, rows, cols, group, bits int) (float64, error) {
	packed, scales, biases, err := modelfile.QuantizeAffine(v, rows, cols, group, bits)
	if err != nil {
		return 0, err
	}
	d, err := modelfile.DequantizeAffine(packed, scales, biases, rows, cols, group, bits)
	if err != nil {
		return 0, err
	}
	var sum float64
	for i, x := range v {
		e := float64(x - d[i])
		sum += e * e
	}
	return sum / float64(len(v)), nil
}

// plan measures every quantizable tensor's sensitivity and raises the
// most sensitive to HighBits while the average code bits per quantized
// weight stays within TargetBits (greedy: a tensor too large for what is
// left of the budget is passed over for smaller ones).
func (s *source) plan(ctx context.Context, o Options, progress func()) (map[string]int, error) {
	var sens []Sensitivity
	var total int64
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
		base, err := quantMSE(v, rows, cols, o.GroupSize, o.Bits)
		if err != nil {
			return nil, fmt.Errorf("quant: %s: %w", name, err)
		}
		high, err := quantMSE(v, rows, cols, o.GroupSize, o.HighBits)
		if err != nil {
			return nil, fmt.Errorf("quant: %s: %w", name, err)
		}
		sens = append(sens, Sensitivity{Name: name, Weights: int64(len(v)), BaseMSE: base, HighMSE: high})
		total += int64(len(v))
		progress()
	}
	return allocate(sens, total, o), nil
}

// allocate gives each tensor its bits under the budget.
func allocate(sens []Sensitivity, total int64, o Options) map[string]int {
	bits := make(map[string]int, len(sens))
	for _, s := range sens {
		bits[s.Name] = o.Bits
	}
	sort.SliceStable(sens, func(i, j int) bool {
		if sens[i].Gain() != sens[j].Gain() {
			return sens[i].Gain() > sens[j].Gain()
		}
		return sens[i].Name < sens[j].Name
	})
	budget := (o.TargetBits - float64(o.Bits)) * float64(total)
	step := float64(o.HighBits - o.Bits)
	for _, s := range sens {
		cost := step * float64(s.Weights)
		if cost <= budget && s.Gain() > 0 {
			bits[s.Name] = o.HighBits
			budget -= cost
		}
	}
	return bits
}
