package modelfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
)

// MLX quantization modes: affine (codes times a scale plus a bias per
// group) and the floating-point ones, whose codes are small floats
// (E2M1, E4M3) times a uint8 scale per group (E8M0, or E4M3 for nvfp4),
// without biases.
const (
	ModeAffine = "affine"
	ModeMXFP4  = "mxfp4"
	ModeMXFP8  = "mxfp8"
	ModeNVFP4  = "nvfp4"
)

// CheckQuant validates a mode's parameters: affine as CheckAffine says;
// mxfp4 is 4 bits in groups of 32, mxfp8 8 bits in groups of 32, nvfp4 4
// bits in groups of 16 (the only values MLX takes).
func CheckQuant(mode string, groupSize, bits int) error {
	if mode == ModeAffine {
		return CheckAffine(groupSize, bits)
	}
	w, ok := modeDefaults[mode]
	if !ok {
		return fmt.Errorf("%w: quantization mode %q (want affine, mxfp4, mxfp8 or nvfp4)", ErrUnsupported, mode)
	}
	if groupSize != w[0] || bits != w[1] {
		return fmt.Errorf("%w: %s quantization with group size %d and %d bits (want %d and %d)", ErrInvalidConfig, mode, groupSize, bits, w[0], w[1])
	}
	return nil
}

// modeDefaults are each mode's group size and bits when a layer's
// parameters leave them out (MLX's to_quantized defaults); the
// floating-point modes allow nothing else.
var modeDefaults = map[string][2]int{ModeAffine: {64, 4}, ModeMXFP4: {32, 4}, ModeMXFP8: {32, 8}, ModeNVFP4: {16, 4}}

// QuantParams is how one layer is quantized.
type QuantParams struct {
	GroupSize int    `json:"group_size"`
	Bits      int    `json:"bits"`
	Mode      string `json:"mode"`
}

// Quantization is the "quantization" block of an mlx-lm config.json: the
// default parameters plus per-module overrides keyed by module path (e.g.
// "model.layers.0.mlp.down_proj"). An override of nil means the module is
// not quantized (the file says false).
type Quantization struct {
	QuantParams
	Overrides map[string]*QuantParams `json:"overrides,omitempty"`
}

// For reports whether the module at path is quantized, and how. A path
// named in the overrides decides; otherwise the module is quantized with
// the default parameters iff hasScales ("<path>.scales" exists), the rule
// mlx-lm applies when loading.
func (q *Quantization) For(path string, hasScales bool) (QuantParams, bool) {
	if q == nil {
		return QuantParams{}, false
	}
	if o, ok := q.Overrides[path]; ok {
		if o == nil {
			return QuantParams{}, false
		}
		return *o, true
	}
	if hasScales {
		return q.QuantParams, true
	}
	return QuantParams{}, false
}

// OverridePaths returns the overridden module paths, sorted.
func (q *Quantization) OverridePaths() []string {
	paths := make([]string, 0, len(q.Overrides))
	for p := range q.Overrides {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return paths
}

// CheckAffine validates affine parameters: bits 2, 3, 4, 5, 6 or 8 and a
// group size of 32, 64 or 128.
func CheckAffine(groupSize, bits int) error {
	switch bits {
	case 2, 3, 4, 5, 6, 8:
	default:
		return fmt.Errorf("%w: affine quantization with %d bits (want 2, 3, 4, 5, 6 or 8)", ErrInvalidConfig, bits)
	}
	switch groupSize {
	case 32, 64, 128:
	default:
		return fmt.Errorf("%w: affine quantization group size %d (want 32, 64 or 128)", ErrInvalidConfig, groupSize)
	}
	return nil
}

// parseQuantization reads the "quantization" block, or failing that the
// "quantization_config" block when it is mlx-lm's copy of it. It returns
// nil for a model that is not quantized.
func parseQuantization(quant, quantConfig json.RawMessage) (*Quantization, error) {
	field, block := "quantization", quant
	if isNull(block) {
		field, block = "quantization_config", quantConfig
		if isNull(block) {
			return nil, nil
		}
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(block, &keys); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidConfig, field, err)
	}
	if m, ok := keys["quant_method"]; ok {
		var method string
		if err := json.Unmarshal(m, &method); err != nil || method != "mlx" {
			return nil, fmt.Errorf("%w: %s: quant_method %s (only MLX affine quantization loads)", ErrUnsupported, field, m)
		}
	}
	q := &Quantization{QuantParams: QuantParams{Mode: ModeAffine}}
	if err := decodeParam(keys, "group_size", &q.GroupSize); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidConfig, field, err)
	}
	if err := decodeParam(keys, "bits", &q.Bits); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidConfig, field, err)
	}
	if err := decodeParam(keys, "mode", &q.Mode); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidConfig, field, err)
	}
	if _, ok := keys["group_size"]; !ok {
		return nil, fmt.Errorf("%w: %s: missing group_size", ErrInvalidConfig, field)
	}
	if _, ok := keys["bits"]; !ok {
		return nil, fmt.Errorf("%w: %s: missing bits", ErrInvalidConfig, field)
	}
	if err := checkParams(field, q.QuantParams); err != nil {
		return nil, err
	}
	for path, raw := range keys {
		switch path {
		case "group_size", "bits", "mode", "quant_method":
			continue
		}
		raw = bytes.TrimSpace(raw)
		switch {
		case bytes.Equal(raw, []byte("false")):
			q.setOverride(path, nil)
		case bytes.Equal(raw, []byte("true")):
			p := q.QuantParams
			q.setOverride(path, &p)
		case len(raw) > 0 && raw[0] == '{':
			var o map[string]json.RawMessage
			if err := json.Unmarshal(raw, &o); err != nil {
				return nil, fmt.Errorf("%w: %s: %q: %v", ErrInvalidConfig, field, path, err)
			}
			// mlx-lm hands the object to the layer's to_quantized as it is:
			// a mode left out is affine (mlx_lm.convert writes a MoE
			// router's 8 bits as {"group_size": 64, "bits": 8} beside a
			// model-wide mxfp4), a group size or bits left out that mode's
			// default.
			p := QuantParams{Mode: ModeAffine}
			if err := decodeParam(o, "mode", &p.Mode); err != nil {
				return nil, fmt.Errorf("%w: %s: %q: %v", ErrInvalidConfig, field, path, err)
			}
			// mlx-lm's nvfp4 with one tensor scale per expert
			// (quantize_model's global_scale) marks the layers it gave one;
			// their weights need it and it is not implemented: refused here,
			// so the models list says so before any load.
			var global bool
			if err := decodeParam(o, "global_scale", &global); err != nil {
				return nil, fmt.Errorf("%w: %s: %q: %v", ErrInvalidConfig, field, path, err)
			}
			if global {
				return nil, fmt.Errorf("%w: %s: %q: an nvfp4 global_scale is not supported", ErrUnsupported, field, path)
			}
			d := modeDefaults[p.Mode]
			p.GroupSize, p.Bits = d[0], d[1]
			for _, k := range []struct {
				name string
				dst  any
			}{{"group_size", &p.GroupSize}, {"bits", &p.Bits}} {
				if err := decodeParam(o, k.name, k.dst); err != nil {
					return nil, fmt.Errorf("%w: %s: %q: %v", ErrInvalidConfig, field, path, err)
				}
			}
			if err := checkParams(field+": "+path, p); err != nil {
				return nil, err
			}
			q.setOverride(path, &p)
		default:
			// Scalar keys other than the known ones are not module paths
			// (tools add bookkeeping such as "desc_act"); ignore them.
		}
	}
	return q, nil
}

func (q *Quantization) setOverride(path string, p *QuantParams) {
	if q.Overrides == nil {
		q.Overrides = make(map[string]*QuantParams)
	}
	q.Overrides[path] = p
}

func decodeParam(keys map[string]json.RawMessage, name string, dst any) error {
	raw, ok := keys[name]
	if !ok || isNull(raw) {
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("%s: %v", name, err)
	}
	return nil
}

func checkParams(where string, p QuantParams) error {
	if err := CheckQuant(p.Mode, p.GroupSize, p.Bits); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	return nil
}

func isNull(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) == 0 || bytes.Equal(b, []byte("null"))
}

// ParseQuantization reads a "quantization" block as mlx-lm writes it into
// config.json (as a diffusers component's config carries it too); nil
// for an absent or null block.
func ParseQuantization(block json.RawMessage) (*Quantization, error) {
	return parseQuantization(block, nil)
}
