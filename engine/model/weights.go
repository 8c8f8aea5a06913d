package model

import (
	"errors"
	"fmt"
	"strings"

	"fusion/engine/backend"
	"fusion/engine/gguf"
	"fusion/engine/modelfile"
	"fusion/engine/tensor"
)

// ErrBadWeights: a weight is missing or has the wrong shape or type.
var ErrBadWeights = errors.New("bad weights")

// source is where weights come from, by Hugging Face names: modules
// ("model.layers.0.self_attn.q_proj") for matrices, tensors
// ("model.norm.weight") for vectors.
type source interface {
	weight(path string) (backend.WeightData, error)
	// experts returns the experts of a stacked module (mlx-lm's
	// SwitchLinear: path.weight [E, out, in]).
	experts(path string) ([]backend.WeightData, error)
	vector(name string) (backend.VectorData, error)
	// module returns the file's module at path as modelfile describes it
	// (for weights rebuilt on load, as DeepSeek's kv_b_proj).
	module(path string) (*modelfile.Linear, error)
	has(name string) bool
	close() error
}

// loader uploads weights to the backend, checking their shapes against
// the config, and keeps the first error so that architecture files can
// read like a list of weights.
type loader struct {
	src   source
	be    backend.Backend
	cfg   *modelfile.Config
	layer int // the layer being loaded
	dims  dims
	err   error
	bytes int64
	// normOffset is added to every vector (Gemma's RMSNorm scales by
	// 1 + weight).
	normOffset float32
	// What the backend made, for Model.Close to release.
	weights []backend.Weight
	vectors []backend.Vector
	// onesOf holds the unit vectors made by ones, by width.
	onesOf map[int]backend.Vector
}

// dims are the sizes weights are checked against.
type dims struct {
	hidden, intermediate, vocab int
	heads, kvHeads, headDim     int
	mla                         *modelfile.MLA // the low-rank norms' widths
}

// shape returns the [out, in] a matrix named path must have (0, 0 if
// unknown), from its last component.
func (d dims) shape(path string) (out, in int) {
	switch path[strings.LastIndex(path, ".")+1:] {
	case "q_proj":
		return d.heads * d.headDim, d.hidden
	case "k_proj", "v_proj":
		return d.kvHeads * d.headDim, d.hidden
	case "o_proj":
		return d.hidden, d.heads * d.headDim
	case "gate_proj", "up_proj":
		return d.intermediate, d.hidden
	case "down_proj":
		return d.hidden, d.intermediate
	case "embed_tokens", "lm_head":
		return d.vocab, d.hidden
	}
	return 0, 0
}

// length returns the length a vector named name must have.
func (d dims) length(name string) int {
	if strings.HasSuffix(name, "q_norm.weight") || strings.HasSuffix(name, "k_norm.weight") {
		return d.headDim
	}
	if strings.HasSuffix(name, "self_attn.sinks") {
		return d.heads
	}
	if d.mla != nil && strings.HasSuffix(name, "q_a_layernorm.weight") {
		return d.mla.QLoraRank
	}
	if d.mla != nil && strings.HasSuffix(name, "kv_a_layernorm.weight") {
		return d.mla.KVLoraRank
	}
	return d.hidden
}

func (l *loader) fail(err error) {
	if l.err == nil {
		l.err = err
	}
}

// linear loads the matrix (and bias) of the module at path.
func (l *loader) linear(path string) backend.Weight {
	out, in := l.dims.shape(path)
	return l.matrix(path, out, in)
}

// upload checks d's shape against [out, in] (unless out is 0) and puts
// it on the backend.
func (l *loader) upload(d backend.WeightData, out, in int) backend.Weight {
	if l.err != nil {
		return nil
	}
	if out != 0 && (d.Out != out || d.In != in) {
		l.fail(fmt.Errorf("%w: %s is [%d, %d], the config says [%d, %d]", ErrBadWeights, d.Name, d.Out, d.In, out, in))
		return nil
	}
	w, err := l.be.Weight(d)
	if err != nil {
		l.fail(fmt.Errorf("%w: %w", ErrBadWeights, err))
		return nil
	}
	l.bytes += w.Bytes()
	l.weights = append(l.weights, w)
	return w
}

// lookupVector finds the vector name, false (the failure recorded) if
// it cannot, or if loading has already failed.
func (l *loader) lookupVector(name string) (backend.VectorData, bool) {
	if l.err != nil {
		return backend.VectorData{}, false
	}
	d, err := l.src.vector(name)
	if err != nil {
		l.fail(err)
		return backend.VectorData{}, false
	}
	return d, true
}

// vector loads a norm weight.
func (l *loader) vector(name string) backend.Vector {
	d, ok := l.lookupVector(name)
	if !ok {
		return nil
	}
	if n := d.Data.Shape; len(n) != 1 || int(n[0]) != l.dims.length(name) {
		l.fail(fmt.Errorf("%w: %s has shape %v, want [%d]", ErrBadWeights, name, n, l.dims.length(name)))
		return nil
	}
	if l.normOffset != 0 {
		var err error
		if d, err = offsetVector(d, l.normOffset); err != nil {
			l.fail(fmt.Errorf("%w: %w", ErrBadWeights, err))
			return nil
		}
	}
	return l.uploadVector(d)
}

// uploadVector puts d on the backend, counted in the model's bytes.
func (l *loader) uploadVector(d backend.VectorData) backend.Vector {
	v, err := l.be.Vector(d)
	if err != nil {
		l.fail(fmt.Errorf("%w: %w", ErrBadWeights, err))
		return nil
	}
	l.bytes += v.Bytes()
	l.vectors = append(l.vectors, v)
	return v
}

// requireBias fails unless the module at path has a bias.
func (l *loader) requireBias(path string) {
	if l.err == nil && !l.src.has(path+".bias") {
		l.fail(fmt.Errorf("%w: %s.bias is missing", ErrBadWeights, path))
	}
}

// safetensorsSource reads a model directory.
type safetensorsSource struct{ m *modelfile.Model }

func (s safetensorsSource) weight(path string) (backend.WeightData, error) {
	l, err := s.m.Linear(path)
	if err != nil {
		return backend.WeightData{}, fmt.Errorf("%w: %w", ErrBadWeights, err)
	}
	return linearData(path, l), nil
}

// linearData describes a safetensors module for the backend.
func linearData(name string, l *modelfile.Linear) backend.WeightData {
	d := backend.WeightData{Name: name, Format: backend.Dense, Out: l.Out, In: l.In, Data: l.Weight, Bias: l.Bias}
	switch {
	case l.Quantized && l.Mode == modelfile.ModeAffine:
		d.Format, d.Scales, d.Biases, d.Bits, d.Group = backend.MLXAffine, l.Scales, l.Biases, l.Bits, l.GroupSize
	case l.Quantized:
		d.Format, d.Scales, d.Mode, d.Bits, d.Group = backend.MLXFloat, l.Scales, l.Mode, l.Bits, l.GroupSize
	}
	return d
}

func (s safetensorsSource) experts(path string) ([]backend.WeightData, error) {
	ls, err := s.m.Experts(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadWeights, err)
	}
	out := make([]backend.WeightData, len(ls))
	for e, l := range ls {
		out[e] = linearData(fmt.Sprintf("%s[%d]", path, e), l)
	}
	return out, nil
}

func (s safetensorsSource) vector(name string) (backend.VectorData, error) {
	t, ok := s.m.Tensor(name)
	if !ok {
		return backend.VectorData{}, fmt.Errorf("%w: %s is missing", ErrBadWeights, name)
	}
	return backend.VectorData{Name: name, Data: t}, nil
}

func (s safetensorsSource) module(path string) (*modelfile.Linear, error) {
	l, err := s.m.Linear(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadWeights, err)
	}
	return l, nil
}

func (s safetensorsSource) has(name string) bool { return s.m.Has(name) }
func (s safetensorsSource) close() error         { return s.m.Close() }

// ggufSource reads a GGUF file through the Hugging Face names.
type ggufSource struct{ f *gguf.File }

func (g ggufSource) tensor(hf string) (tensor.Tensor, bool) {
	name, ok := gguf.GGUFNameFor(gguf.HFArch(g.f.Architecture()), hf)
	if !ok {
		return tensor.Tensor{}, false
	}
	return g.f.Tensor(name)
}

func (g ggufSource) weight(path string) (backend.WeightData, error) {
	t, ok := g.tensor(path + ".weight")
	if !ok {
		return backend.WeightData{}, fmt.Errorf("%w: %s.weight is missing from %s", ErrBadWeights, path, g.f.Name)
	}
	if len(t.Shape) != 2 {
		return backend.WeightData{}, fmt.Errorf("%w: %s has shape %v, want a matrix", ErrBadWeights, t.Name, t.Shape)
	}
	d, err := ggufMatrix(path, t)
	if err != nil {
		return backend.WeightData{}, err
	}
	if b, ok := g.tensor(path + ".bias"); ok {
		d.Bias = &b
	}
	return d, nil
}

// ggufMatrix describes the matrix t ([out, in]) for the backend.
func ggufMatrix(name string, t tensor.Tensor) (backend.WeightData, error) {
	f, err := ggufFormat(t)
	if err != nil {
		return backend.WeightData{}, err
	}
	d := backend.WeightData{Name: name, Format: f, Out: int(t.Shape[0]), In: int(t.Shape[1]), Data: t}
	if t.DType == tensor.MXFP4 {
		return ggufMXFP4(d)
	}
	return d, nil
}

// ggufFormat is how the backends take a GGUF matrix of t's type: floats
// dense, the block types they run as they are, ggml's MXFP4 (gpt-oss's
// experts) as MLX's mxfp4 (ggufMXFP4). Checking costs nothing (the models
// list asks it of every matrix).
func ggufFormat(t tensor.Tensor) (backend.Format, error) {
	switch t.DType {
	case tensor.F32, tensor.F16, tensor.BF16:
		return backend.Dense, nil
	case tensor.Q8_0, tensor.Q4_0, tensor.Q2_K, tensor.Q3_K, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K:
		return backend.GGUFBlocks, nil
	case tensor.MXFP4:
		return backend.MLXFloat, nil
	}
	return 0, fmt.Errorf("%w: %s is %v (supported: F32, F16, BF16, Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, MXFP4)", ErrBadWeights, t.Name, t.DType)
}

// ggufMXFP4 turns d, a matrix of ggml MXFP4 blocks, into MLX's mxfp4
// layout, which both backends run (the CPU's kernels.MLXFloat, MLX's
// quantized matmul): every value is the same (gguf.MXFP4ToMLX), only the
// codes are reordered and the scales set apart. The copy is the size of
// the file's bytes (17 per 32 values either way); the file's pages are not
// read again.
func ggufMXFP4(d backend.WeightData) (backend.WeightData, error) {
	if d.In%32 != 0 {
		return backend.WeightData{}, fmt.Errorf("%w: %s: MXFP4 rows of %d values are not whole blocks of 32", ErrBadWeights, d.Data.Name, d.In)
	}
	codes, scales, err := gguf.MXFP4ToMLX(d.Data.Data)
	if err != nil {
		return backend.WeightData{}, fmt.Errorf("%w: %s: %w", ErrBadWeights, d.Data.Name, err)
	}
	out, in := int64(d.Out), int64(d.In)
	d.Format, d.Mode, d.Bits, d.Group = backend.MLXFloat, modelfile.ModeMXFP4, 4, 32
	d.Data = tensor.Tensor{Name: d.Data.Name, DType: tensor.U32, Shape: []int64{out, in / 8}, Data: codes}
	d.Scales = tensor.Tensor{Name: d.Data.Name + ".scales", DType: tensor.U8, Shape: []int64{out, in / 32}, Data: scales}
	return d, nil
}

// experts splits a stacked ffn_*_exps tensor [experts, out, in] into one
// matrix per expert, each a view of its slice of the file's bytes (a
// quantization block never straddles a row, so every expert's rows are
// whole blocks).
func (g ggufSource) experts(path string) ([]backend.WeightData, error) {
	t, ok := g.tensor(path + ".weight")
	if !ok {
		return nil, fmt.Errorf("%w: %s.weight is missing from %s", ErrBadWeights, path, g.f.Name)
	}
	if len(t.Shape) != 3 || t.Shape[0] <= 0 {
		return nil, fmt.Errorf("%w: %s has shape %v, want [experts, out, in]", ErrBadWeights, t.Name, t.Shape)
	}
	n := int(t.Shape[0])
	if len(t.Data)%n != 0 {
		return nil, fmt.Errorf("%w: %s: %d bytes do not split into %d experts", ErrBadWeights, t.Name, len(t.Data), n)
	}
	per := len(t.Data) / n
	bias, err := g.expertBiases(path, t.Shape)
	if err != nil {
		return nil, err
	}
	out := make([]backend.WeightData, n)
	for e := range n {
		view := tensor.Tensor{Name: fmt.Sprintf("%s[%d]", t.Name, e), DType: t.DType, Shape: t.Shape[1:],
			Data: t.Data[e*per : (e+1)*per : (e+1)*per]}
		d, err := ggufMatrix(fmt.Sprintf("%s[%d]", path, e), view)
		if err != nil {
			return nil, err
		}
		if bias.Data != nil {
			b := bias.Data[e*len(bias.Data)/n : (e+1)*len(bias.Data)/n]
			d.Bias = &tensor.Tensor{Name: fmt.Sprintf("%s[%d]", bias.Name, e), DType: bias.DType, Shape: bias.Shape[1:], Data: b}
		}
		out[e] = d
	}
	return out, nil
}

// expertBiases returns the stacked experts' biases at path ([experts,
// out], gpt-oss's ffn_*_exps.bias), a zero tensor when there are none, or
// an error when their shape does not match the weights' [experts, out,
// in].
func (g ggufSource) expertBiases(path string, shape []int64) (tensor.Tensor, error) {
	b, ok := g.tensor(path + ".bias")
	if !ok {
		return tensor.Tensor{}, nil
	}
	if len(b.Shape) != 2 || b.Shape[0] != shape[0] || b.Shape[1] != shape[1] || b.DType.Quantized() {
		return tensor.Tensor{}, fmt.Errorf("%w: %s is %v %v, want float [%d, %d]", ErrBadWeights, b.Name, b.DType, b.Shape, shape[0], shape[1])
	}
	return b, nil
}

func (g ggufSource) vector(name string) (backend.VectorData, error) {
	t, ok := g.tensor(name)
	if !ok {
		return backend.VectorData{}, fmt.Errorf("%w: %s is missing from %s", ErrBadWeights, name, g.f.Name)
	}
	return backend.VectorData{Name: name, Data: t}, nil
}

func (g ggufSource) module(path string) (*modelfile.Linear, error) {
	return nil, fmt.Errorf("%w: %s: not read from GGUF files", ErrBadWeights, path)
}

func (g ggufSource) has(name string) bool { _, ok := g.tensor(name); return ok }
func (g ggufSource) close() error         { return g.f.Close() }

// matrix loads the matrix at path, which must be [out, in] (unless out
// is 0).
func (l *loader) matrix(path string, out, in int) backend.Weight {
	d, ok := l.data(path)
	if !ok {
		return nil
	}
	return l.upload(d, out, in)
}

// data looks the matrix at path up, false (the failure recorded) if it
// cannot, or if loading has already failed.
func (l *loader) data(path string) (backend.WeightData, bool) {
	if l.err != nil {
		return backend.WeightData{}, false
	}
	d, err := l.src.weight(path)
	if err != nil {
		l.fail(err)
		return backend.WeightData{}, false
	}
	return d, true
}

// experts loads the n experts of the stacked module at path, each
// [out, in].
func (l *loader) experts(path string, n, out, in int) []backend.Weight {
	if l.err != nil {
		return nil
	}
	ds, err := l.src.experts(path)
	if err != nil {
		l.fail(err)
		return nil
	}
	if len(ds) != n {
		l.fail(fmt.Errorf("%w: %s stacks %d experts, the config says %d", ErrBadWeights, path, len(ds), n))
		return nil
	}
	ws := make([]backend.Weight, n)
	for e, d := range ds {
		if ws[e] = l.upload(d, out, in); ws[e] == nil {
			return nil
		}
	}
	return ws
}
