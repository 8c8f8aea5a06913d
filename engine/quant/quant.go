// Package quant makes quantized models from float ones (oQ, "online
// quantization"): it reads a model directory with BF16/F16/F32 safetensors
// weights (or a float GGUF file, read back into that layout) and writes a
// new directory with MLX affine-quantized weights, the same bytes
// mlx_lm.convert -q writes for a uniform setting, or a
// mixed-precision plan that gives the tensors whose quantization error is
// largest more bits at a target average. Perplexity measures a model
// (float or quantized) on a text with the CPU backend, so a plan can be
// judged against the source.
package quant

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"fusion/engine/modelfile"
	"fusion/engine/safetensors"
	"fusion/engine/tensor"
	"fusion/internal/atomicfile"
)

// Errors callers branch on.
var (
	// ErrBadOptions: the options are out of range.
	ErrBadOptions = errors.New("quant: bad options")
	// ErrUnsupported: the source cannot be quantized here (already
	// quantized — a quantized GGUF too —, neither safetensors nor a
	// float GGUF, an architecture whose mlx-lm weight names differ from
	// the file's).
	ErrUnsupported = errors.New("quant: unsupported source")
	// ErrExists: the destination exists.
	ErrExists = errors.New("quant: destination exists")
)

// Limits and defaults.
const (
	DefaultBits      = 4
	DefaultGroupSize = 64
	DefaultHighBits  = 8
)

// Options say how to quantize.
type Options struct {
	// Bits (2, 3, 4, 5, 6 or 8) and GroupSize (32, 64 or 128): the
	// uniform setting, and the base of a mixed one.
	Bits      int
	GroupSize int
	// TargetBits > 0 asks for mixed precision: every quantizable tensor
	// gets one of the candidate widths (Widths × GroupSizes) so that the
	// model's predicted loss is least while the true bits per quantized
	// weight — codes, scales and biases, Result.BitsPerWeight — stay
	// within TargetBits (4-bit in groups of 64 with bf16 scales is 4.5,
	// with f32 scales 5.0). 0: uniform.
	TargetBits float64
	// HighBits is a mixed plan's second width when Widths is empty
	// (default 8).
	HighBits int
	// Widths are the bit widths a mixed plan chooses from (each of 2, 3,
	// 4, 5, 6, 8; default Bits and HighBits), in each group size of
	// GroupSizes (default GroupSize alone). Bits and GroupSize remain
	// the config's default entry; other widths are per-module overrides.
	Widths     []int
	GroupSizes []int
	// MeasureEveryWidth, with a calibration text, measures the KL
	// divergence at every candidate width (a forward pass each); by
	// default only the base width is measured and the others' scaled by
	// their weight errors (Candidate.Estimated).
	MeasureEveryWidth bool
	// Calibration, when set with TargetBits, is the text a mixed plan's
	// sensitivities are measured on (up to MaxCalibrationTokens tokens):
	// each quantizable tensor alone is quantized at Bits and at HighBits
	// and the source's predictions on the text compared with the
	// result's (mean KL divergence per token). Empty: the weight-space
	// measure (each tensor's own quantization error), no forward pass.
	// CalibrationText is a bundled default.
	Calibration string
	// CalibrationWindow splits the calibration text into windows of this
	// many tokens, each scored from a fresh context (0: one window).
	CalibrationWindow int
	// Format is the output: FormatMLX (default) or FormatGGUF, one file
	// of GGUFType (one of GGUFTypes) at the destination (".gguf"
	// appended when missing); Bits, GroupSize and the mixed plan apply to
	// MLX only.
	Format   string
	GGUFType string
	// Progress is told after each tensor (steps: tensors analysed in a
	// mixed plan, then tensors written); Log gets a line now and then.
	Progress func(done, total int)
	Log      func(msg string)
	// PlanFile, for a mixed plan, is a file name in the output directory
	// that Result.Plan is written to as JSON (with the directory, before
	// its rename into place): a model's plan grows with its tensors
	// (about 350 bytes each), more than a job record holds. "": none.
	PlanFile string
	// SourceModel is the source's model id recorded in the output's
	// config (SourceKey); "" is src's base name. A model of a Hugging
	// Face cache is a snapshot directory named by its commit, listed as
	// ORG/NAME.
	SourceModel string
}

// Result describes what Quantize wrote.
type Result struct {
	Dir       string  `json:"dir"`
	Bytes     int64   `json:"bytes"`      // size of the weights file
	Bits      int     `json:"bits"`       // base bits
	GroupSize int     `json:"group_size"` // group size
	Mixed     bool    `json:"mixed"`
	Tensors   int     `json:"tensors"`   // tensors written
	Quantized int     `json:"quantized"` // of which quantized
	Raised    int     `json:"raised"`    // of which not at the base width (mixed)
	AvgBits   float64 `json:"avg_bits"`  // code bits per quantized weight (scales and biases not counted)
	// BitsPerWeight counts every bit of the quantized tensors (codes,
	// scales, biases) per quantized weight: what TargetBits bounds.
	BitsPerWeight float64 `json:"bits_per_weight"`
	// ModelBitsPerWeight is mlx-lm's figure (convert's "bits per
	// weight"): every stored byte of the model, float tensors included,
	// × 8 / its parameters (a quantized tensor's counted unpacked).
	ModelBitsPerWeight float64 `json:"model_bits_per_weight"`
	// Widths counts the quantized tensors at each width ("4/64": bits
	// and group size).
	Widths map[string]int `json:"widths,omitempty"`
	// Format is FormatGGUF for a GGUF output (Dir is then the file), of
	// Type, with TensorTypes counting the tensors stored in each ggml
	// type; empty for MLX.
	Format      string         `json:"format,omitempty"`
	Type        string         `json:"type,omitempty"`
	TensorTypes map[string]int `json:"tensor_types,omitempty"`
	// Sensitivity is how a mixed plan measured the tensors:
	// SensitivityWeights or SensitivityCalibration; Plan lists every
	// quantized tensor with its measures and the bits it got.
	Sensitivity string       `json:"sensitivity,omitempty"`
	Plan        []TensorPlan `json:"plan,omitempty"`
	// Source is the float model it was made from, as config.json
	// records it under SourceKey (MLX outputs).
	Source *Source `json:"source,omitempty"`
}

// How a mixed plan measures sensitivity (Result.Sensitivity).
const (
	SensitivityWeights     = "weights"
	SensitivityCalibration = "calibration"
)

// TensorPlan is one tensor of a mixed plan: its sensitivity and the
// width it got.
type TensorPlan struct {
	Sensitivity
	Bits      int `json:"bits"`
	GroupSize int `json:"group_size"`
}

// Validate checks the options, filling in the defaults.
func (o *Options) Validate() error {
	switch strings.ToLower(o.Format) {
	case "", FormatMLX:
		o.Format = FormatMLX
		if o.GGUFType != "" {
			return fmt.Errorf("%w: a GGUF type (%q) needs format gguf", ErrBadOptions, o.GGUFType)
		}
	case FormatGGUF:
		o.Format = FormatGGUF
		i := slices.IndexFunc(GGUFTypes, func(t string) bool { return strings.EqualFold(t, o.GGUFType) })
		if i < 0 {
			return fmt.Errorf("%w: GGUF type %q (want %s)", ErrBadOptions, o.GGUFType, strings.Join(GGUFTypes, ", "))
		}
		if o.TargetBits != 0 {
			return fmt.Errorf("%w: target_bits (a mixed MLX plan) with format gguf", ErrBadOptions)
		}
		o.GGUFType = GGUFTypes[i]
	default:
		return fmt.Errorf("%w: format %q (want mlx or gguf)", ErrBadOptions, o.Format)
	}
	if o.Bits == 0 {
		o.Bits = DefaultBits
	}
	if o.GroupSize == 0 {
		o.GroupSize = DefaultGroupSize
	}
	if o.HighBits == 0 {
		o.HighBits = DefaultHighBits
	}
	for _, w := range append(o.widths(), Width{o.Bits, o.GroupSize}) {
		if err := modelfile.CheckAffine(w.GroupSize, w.Bits); err != nil {
			return fmt.Errorf("%w: %v", ErrBadOptions, err)
		}
	}
	if (len(o.Widths) > 0 || len(o.GroupSizes) > 0 || o.MeasureEveryWidth) && o.TargetBits == 0 {
		return fmt.Errorf("%w: widths, group sizes and measure_every_width need target_bits (a mixed plan)", ErrBadOptions)
	}
	if o.Calibration != "" && o.TargetBits == 0 {
		return fmt.Errorf("%w: a calibration text needs target_bits (a mixed plan)", ErrBadOptions)
	}
	if o.CalibrationWindow < 0 {
		return fmt.Errorf("%w: calibration window %d", ErrBadOptions, o.CalibrationWindow)
	}
	// The cheapest candidate with no scales at all and the dearest with
	// f32 scales bound any feasible target; Quantize checks it exactly
	// once the source's dtype is known.
	lo, hi := math.Inf(1), 0.0
	for _, w := range o.widths() {
		lo, hi = min(lo, float64(w.Bits)), max(hi, w.BitsPerWeight(tensor.F32))
	}
	if o.TargetBits < 0 || o.TargetBits != 0 && (o.TargetBits <= lo || o.TargetBits > hi) {
		return fmt.Errorf("%w: target_bits %.2f must be above %g and at most %g (true bits per weight: codes, scales and biases)", ErrBadOptions, o.TargetBits, lo, hi)
	}
	return nil
}

// architectures are the families whose safetensors names are mlx-lm's
// parameter names (besides the two sanitize drops below), so the output
// matches mlx_lm.convert's.
var architectures = []string{modelfile.ArchLlama, modelfile.ArchMistral, modelfile.ArchQwen2, modelfile.ArchQwen3, modelfile.ArchPhi3}

// weightFiles are the source files not copied to the destination.
func weightFile(name string) bool {
	for _, suf := range []string{".safetensors", ".bin", ".pt", ".pth", ".gguf", ".npz"} {
		if strings.HasSuffix(name, suf) {
			return true
		}
	}
	return name == modelfile.IndexFile || name == modelfile.ConfigFile
}

// source is an opened float model.
type source struct {
	cfg     *modelfile.Config
	raw     map[string]any // config.json as written
	w       *modelfile.Weights
	dtype   tensor.DType // what the weights are cast to
	names   []string     // tensors written, sorted
	quantOK map[string]bool
}

func openSource(dir string, groupSize int, archs []string) (*source, error) {
	cfg, err := modelfile.LoadConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	if !slices.Contains(archs, cfg.Architecture) {
		return nil, fmt.Errorf("%w: architecture %q (oQ takes %s)", ErrUnsupported, cfg.Architecture, strings.Join(archs, ", "))
	}
	b, err := os.ReadFile(filepath.Join(dir, modelfile.ConfigFile))
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var raw map[string]any
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("quant: config.json: %w", err)
	}
	if raw["quantization"] != nil || raw["quantization_config"] != nil {
		return nil, fmt.Errorf("%w: the model is already quantized", ErrUnsupported)
	}
	w, err := modelfile.OpenWeights(dir, safetensors.LoadMmap)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	s := &source{cfg: cfg, raw: raw, w: w, quantOK: map[string]bool{}}
	// mlx_lm.convert casts the floating weights to the config's dtype.
	switch dt, _ := raw["torch_dtype"].(string); {
	case dt == "bfloat16":
		s.dtype = tensor.BF16
	case dt == "float16":
		s.dtype = tensor.F16
	case dt == "float32":
		s.dtype = tensor.F32
	}
	for _, name := range w.Names() {
		// What mlx-lm's sanitize drops for these families.
		if strings.Contains(name, "rotary_emb.inv_freq") || (cfg.TieWordEmbeddings && name == "lm_head.weight") {
			continue
		}
		t, _ := w.Tensor(name)
		switch t.DType {
		case tensor.F32, tensor.F16, tensor.BF16:
		default:
			w.Close()
			return nil, fmt.Errorf("%w: tensor %s is %v, not a float", ErrUnsupported, name, t.DType)
		}
		if s.dtype == tensor.Invalid {
			s.dtype = t.DType
		}
		s.names = append(s.names, name)
		// mlx-lm quantizes every Linear and Embedding whose input size is
		// a multiple of the group size; in these families those are the
		// 2-D weights.
		s.quantOK[name] = strings.HasSuffix(name, ".weight") && len(t.Shape) == 2 && t.Shape[1]%int64(groupSize) == 0
	}
	return s, nil
}

// floats reads a tensor as float32 values after the cast to s.dtype.
func (s *source) floats(name string) (tensor.Tensor, []float32, error) {
	t, _ := s.w.Tensor(name)
	v, err := tensor.Floats(t)
	if err != nil {
		return t, nil, fmt.Errorf("quant: %w", err)
	}
	if s.dtype != t.DType {
		roundTo(s.dtype, v)
	}
	return t, v, nil
}

// roundTo rounds v in place to the values dt can hold (BF16, F16; others
// are left alone).
func roundTo(dt tensor.DType, v []float32) {
	switch dt {
	case tensor.BF16:
		for i, x := range v {
			v[i] = tensor.BF16ToF32(tensor.F32ToBF16(x))
		}
	case tensor.F16:
		for i, x := range v {
			v[i] = tensor.F16ToF32(tensor.F32ToF16(x))
		}
	}
}

// Quantize writes the quantized model of src into dst (which must not
// exist; it is built beside it and renamed into place). ctx ends it
// between tensors.
func Quantize(ctx context.Context, src, dst string, o Options) (Result, error) {
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	if IsGGUF(src) {
		return quantizeGGUFSource(ctx, src, dst, o)
	}
	if o.Format == FormatGGUF {
		return quantizeGGUF(ctx, src, dst, o)
	}
	if _, err := os.Stat(dst); err == nil {
		return Result{}, fmt.Errorf("%w: %s", ErrExists, dst)
	}
	s, err := openSource(src, o.GroupSize, architectures)
	if err != nil {
		return Result{}, err
	}
	defer s.w.Close()
	logf := func(format string, args ...any) {
		if o.Log != nil {
			o.Log(fmt.Sprintf(format, args...))
		}
	}
	total := len(s.names)
	if o.TargetBits > 0 {
		total *= 2
	}
	step := 0
	progress := func() {
		step++
		if o.Progress != nil {
			o.Progress(step, total)
		}
	}
	widths := map[string]Width{}
	for _, n := range s.names {
		if s.quantOK[n] {
			widths[n] = Width{o.Bits, o.GroupSize}
		}
	}
	res := Result{Dir: dst, Bits: o.Bits, GroupSize: o.GroupSize, Mixed: o.TargetBits > 0}
	if o.TargetBits > 0 {
		var sens []Sensitivity
		if sens, err = s.sensitivities(ctx, src, filepath.Dir(dst), o, progress); err != nil {
			return Result{}, err
		}
		var weights int64
		for _, t := range sens {
			weights += t.Weights
		}
		plan, err := allocate(sens, s.dtype, o.TargetBits*float64(weights))
		if err != nil {
			return Result{}, err
		}
		res.Sensitivity = SensitivityWeights
		if o.Calibration != "" {
			res.Sensitivity = SensitivityCalibration
		}
		for i, t := range sens {
			w := plan[i]
			widths[t.Name] = w
			res.Plan = append(res.Plan, TensorPlan{Sensitivity: t, Bits: w.Bits, GroupSize: w.GroupSize})
			if w != (Width{o.Bits, o.GroupSize}) {
				logf("%s: %s (%s)", t.Name, w, t)
			}
		}
	}
	var out []tensor.Tensor
	var codeBits, allBits, weights, params, modelBits float64
	res.Widths = map[string]int{}
	for _, name := range s.names {
		if err := ctx.Err(); err != nil {
			return Result{}, context.Cause(ctx)
		}
		t, v, err := s.floats(name)
		if err != nil {
			return Result{}, err
		}
		params += float64(len(v))
		w, ok := widths[name]
		if !ok {
			out = append(out, tensor.Tensor{Name: name, DType: s.dtype, Shape: t.Shape, Data: tensor.Encode(s.dtype, v)})
			modelBits += 8 * float64(len(out[len(out)-1].Data))
			progress()
			continue
		}
		b := w.Bits
		rows, cols := int(t.Shape[0]), int(t.Shape[1])
		packed, scales, biases, err := modelfile.QuantizeAffine(v, rows, cols, w.GroupSize, b)
		if err != nil {
			return Result{}, fmt.Errorf("quant: %s: %w", name, err)
		}
		words := make([]byte, 4*len(packed))
		for i, w := range packed {
			binary.LittleEndian.PutUint32(words[4*i:], w)
		}
		path := strings.TrimSuffix(name, ".weight")
		g := int64(cols / w.GroupSize)
		out = append(out,
			tensor.Tensor{Name: name, DType: tensor.U32, Shape: []int64{int64(rows), int64(modelfile.PackedCols(cols, b))}, Data: words},
			tensor.Tensor{Name: path + ".scales", DType: s.dtype, Shape: []int64{int64(rows), g}, Data: tensor.Encode(s.dtype, scales)},
			tensor.Tensor{Name: path + ".biases", DType: s.dtype, Shape: []int64{int64(rows), g}, Data: tensor.Encode(s.dtype, biases)},
		)
		n := float64(len(v))
		weights += n
		codeBits += n * float64(b)
		stored := 8 * float64(len(words)+2*len(scales)*s.dtype.BlockBytes())
		allBits += stored
		modelBits += stored
		res.Quantized++
		res.Widths[w.String()]++
		if w != (Width{o.Bits, o.GroupSize}) {
			res.Raised++
		}
		progress()
	}
	if weights > 0 {
		res.AvgBits, res.BitsPerWeight = codeBits/weights, allBits/weights
	}
	if params > 0 {
		res.ModelBitsPerWeight = modelBits / params
	}
	res.Tensors = len(s.names)
	safetensors.SortLikePython(out)
	// The source is recorded when it can be identified; a source that
	// cannot (an unreadable header) is quantized all the same.
	if hash, err := SourceHash(src); err == nil {
		name := o.SourceModel
		if name == "" {
			name = filepath.Base(filepath.Clean(src))
		}
		res.Source = &Source{Model: name, SHA256: hash}
	} else {
		logf("the source is not recorded: %v", err)
	}
	if res.Bytes, err = s.write(dst, src, out, o, widths, res); err != nil {
		return Result{}, err
	}
	logf("wrote %s: %d tensors, %d quantized (%d not at %d bits in groups of %d), %.3f bits per quantized weight, %.3f per parameter",
		dst, res.Tensors, res.Quantized, res.Raised, o.Bits, o.GroupSize, res.BitsPerWeight, res.ModelBitsPerWeight)
	return res, nil
}

// write puts the weights, the index, config.json with its quantization
// block and its source (SourceKey), and the source's other files into a staging directory beside
// dst, then renames it to dst.
func (s *source) write(dst, src string, ts []tensor.Tensor, o Options, widths map[string]Width, res Result) (int64, error) {
	from := res.Source
	parent := filepath.Dir(dst)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return 0, fmt.Errorf("quant: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dst)+".oq-")
	if err != nil {
		return 0, fmt.Errorf("quant: %w", err)
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	wpath := filepath.Join(tmp, modelfile.SingleWeightsFile)
	if err := safetensors.WriteFile(wpath, ts, map[string]string{"format": "mlx"}); err != nil {
		return 0, fmt.Errorf("quant: %w", err)
	}
	st, err := os.Stat(wpath)
	if err != nil {
		return 0, fmt.Errorf("quant: %w", err)
	}
	// The index mlx-lm writes beside even a single file.
	var size int64
	wm := map[string]string{}
	for _, t := range ts {
		size += int64(len(t.Data))
		wm[t.Name] = modelfile.SingleWeightsFile
	}
	idx := map[string]any{"metadata": map[string]any{"total_size": size}, "weight_map": wm}
	if err := writeJSON(filepath.Join(tmp, modelfile.IndexFile), idx); err != nil {
		return 0, err
	}
	q := map[string]any{"group_size": o.GroupSize, "bits": o.Bits, "mode": modelfile.ModeAffine}
	for name, w := range widths {
		if w != (Width{o.Bits, o.GroupSize}) {
			q[strings.TrimSuffix(name, ".weight")] = map[string]any{"group_size": w.GroupSize, "bits": w.Bits, "mode": modelfile.ModeAffine}
		}
	}
	cfg := maps(s.raw)
	cfg["quantization"], cfg["quantization_config"] = q, q
	if from != nil {
		cfg[SourceKey] = from
	}
	if err := writeJSON(filepath.Join(tmp, modelfile.ConfigFile), cfg); err != nil {
		return 0, err
	}
	if err := copyOthers(src, tmp); err != nil {
		return 0, err
	}
	if o.PlanFile != "" && len(res.Plan) > 0 {
		if err := writeJSON(filepath.Join(tmp, o.PlanFile), res.Plan); err != nil {
			return 0, err
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		return 0, fmt.Errorf("quant: %w", err)
	}
	done = true
	return st.Size(), nil
}

func maps(m map[string]any) map[string]any {
	out := make(map[string]any, len(m)+2)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// writeJSON writes v as mlx-lm does: sorted keys, indented by 4.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		return fmt.Errorf("quant: %s: %w", filepath.Base(path), err)
	}
	return atomicfile.WriteMode(path, 0o644, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// copyOthers copies the source's regular non-weight files (tokenizer,
// generation config, chat template, license...) into dir.
func copyOthers(src, dir string) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("quant: %w", err)
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") || weightFile(e.Name()) {
			continue
		}
		// A Hugging Face cache's snapshot holds links into its blobs.
		if st, err := os.Stat(filepath.Join(src, e.Name())); err != nil || !st.Mode().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return fmt.Errorf("quant: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			return fmt.Errorf("quant: %w", err)
		}
	}
	return nil
}

// CheckSource reports whether the model in dir can be quantized
// (ErrUnsupported says why not) without reading its weights' data.
func CheckSource(dir string) error {
	if IsGGUF(dir) {
		return checkGGUF(dir, architectures, false)
	}
	s, err := openSource(dir, DefaultGroupSize, architectures)
	if err != nil {
		return err
	}
	return s.w.Close()
}
