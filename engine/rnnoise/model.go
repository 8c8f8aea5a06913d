package rnnoise

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"fusion/engine/backend"
	"fusion/engine/tensor"
)

// The network's fixed sizes (RNNoise 0.2's rnnoise_data.h).
const (
	// Features per frame: 32 band log energies (DCT), 32 pitch
	// correlations (DCT) and the pitch period.
	Features = 2*Bands + 1
	// Bands is the number of band gains per frame.
	Bands    = 32
	conv1Out = 128
	conv2Out = 384
	// GRUSize is the width of each of the three GRUs.
	GRUSize = 384
	// kernel is the frames each convolution sees (the current one and
	// the two before it).
	kernel  = 3
	catSize = conv2Out + 3*GRUSize // the dense layers' input
	// framesPerStep bounds one backend step: the frames whose arrays
	// live together before the outputs are read and the state carried on
	// (1 s of audio).
	framesPerStep = 100
	// BlobName is the weight blob in a model directory.
	BlobName = "rnnoise.bin"
)

// tanhGate is a sigmoid argument whose value is 1 in float32: GatedTanh(x,
// tanhGate) = tanh(x), the op set having no bare tanh.
const tanhGate = 88

// Model is RNNoise's network with its weights on a backend.
type Model struct {
	be      backend.Backend
	weights []backend.Weight
	bytes   int64
	conv1   backend.Weight // [128, 3·65]
	conv2   backend.Weight // [384, 3·128]
	gruIn   [3]backend.Weight
	gruRec  [3]backend.Weight // the diagonal folded in, biases included
	dense   backend.Weight    // [32, 1536]
	vad     backend.Weight    // [1, 1536]
	tables  *tables           // the signal processing's constants
}

// State is what runs from frame to frame: the two previous frames each
// convolution sees and the three GRU states. The zero State (NewState) is
// the start of a stream, as rnnoise_create leaves it.
type State struct {
	conv1 []float32 // 2·65: frames t−2, t−1 of the features
	conv2 []float32 // 2·128: frames t−2, t−1 of the first convolution
	gru   [3][]float32
}

// NewState returns the state at the start of a stream.
func NewState() *State {
	st := &State{conv1: make([]float32, (kernel-1)*Features), conv2: make([]float32, (kernel-1)*conv1Out)}
	for i := range st.gru {
		st.gru[i] = make([]float32, GRUSize)
	}
	return st
}

// IsModelDir reports whether dir holds an RNNoise weight blob.
func IsModelDir(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, BlobName))
	return err == nil && fi.Mode().IsRegular()
}

// Load reads dir/rnnoise.bin onto be.
func Load(be backend.Backend, dir string) (*Model, error) {
	path := filepath.Join(dir, BlobName)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rnnoise: %w", err)
	}
	m, err := LoadBlob(be, b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// LoadBlob builds the model from a weight blob (ReadBlob). It reads the
// float32 weights (the ones the reference runtime computes with when a
// blob holds both them and int8 copies) and expands the 8×4 block-sparse
// layout of the GRU matrices into dense ones.
func LoadBlob(be backend.Backend, b []byte) (*Model, error) {
	arrays, err := ReadBlob(b)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]Array, len(arrays))
	for _, a := range arrays {
		byName[a.Name] = a
	}
	m := &Model{be: be, tables: newTables()}
	if err := m.load(byName); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// Bytes is the size of the weights on the backend.
func (m *Model) Bytes() int64 { return m.bytes }

// Close releases the weights.
func (m *Model) Close() error {
	if r, ok := m.be.(backend.Releaser); ok && len(m.weights) > 0 {
		r.Release(m.weights, nil)
	}
	m.weights = nil
	return nil
}

func (m *Model) load(byName map[string]Array) error {
	var err error
	layer := func(name string, in, out int, sparse, diag bool) backend.Weight {
		if err != nil {
			return nil
		}
		var w, bias []float32
		if w, bias, err = linear(byName, name, in, out, sparse, diag); err != nil {
			return nil
		}
		var uw backend.Weight
		if uw, err = m.be.Weight(dense(name, w, out, in, bias)); err != nil {
			return nil
		}
		m.weights = append(m.weights, uw)
		m.bytes += uw.Bytes()
		return uw
	}
	m.conv1 = layer("conv1", kernel*Features, conv1Out, false, false)
	m.conv2 = layer("conv2", kernel*conv1Out, conv2Out, false, false)
	in := conv2Out
	for i := range m.gruIn {
		m.gruIn[i] = layer(fmt.Sprintf("gru%d_input", i+1), in, 3*GRUSize, true, false)
		m.gruRec[i] = layer(fmt.Sprintf("gru%d_recurrent", i+1), GRUSize, 3*GRUSize, true, true)
		in = GRUSize
	}
	m.dense = layer("dense_out", catSize, Bands, false, false)
	m.vad = layer("vad_dense", catSize, 1, false, false)
	return err
}

// linear returns the layer name's matrix [out, in] (row-major) and bias
// [out] from its float32 arrays: NAME_weights_float in the column-major
// layout of RNNoise's sgemv, or with NAME_weights_idx in the 8×4 block
// layout of its sparse_sgemv8x4 (per 8 output rows: a block count, then
// for each block the first of its 4 inputs; a block's 32 weights go input
// by input, 8 rows each); NAME_weights_diag, for GRU recurrent weights,
// adds diag[g·in + i] to row g·in + i, column i of each of the 3 gates.
func linear(byName map[string]Array, name string, in, out int, sparse, diag bool) (w, bias []float32, err error) {
	get := func(suffix string, n int) ([]float32, error) {
		a, ok := byName[name+suffix]
		if !ok {
			return nil, fmt.Errorf("%w: no %s%s", ErrNotRNNoise, name, suffix)
		}
		f, err := a.Floats()
		if err != nil {
			return nil, err
		}
		if n >= 0 && len(f) != n {
			return nil, fmt.Errorf("%w: %s%s has %d values, want %d", ErrNotRNNoise, name, suffix, len(f), n)
		}
		return f, nil
	}
	if bias, err = get("_bias", out); err != nil {
		return nil, nil, err
	}
	w = make([]float32, out*in)
	if !sparse {
		src, err := get("_weights_float", out*in)
		if err != nil {
			return nil, nil, err
		}
		for j := range in {
			for i := range out {
				w[i*in+j] = src[j*out+i]
			}
		}
	} else {
		if err := sparseWeights(byName, name, w, in, out); err != nil {
			return nil, nil, err
		}
	}
	if diag {
		d, err := get("_weights_diag", out)
		if err != nil {
			return nil, nil, err
		}
		if out != 3*in {
			return nil, nil, fmt.Errorf("%w: %s has a diagonal but %d outputs for %d inputs", ErrNotRNNoise, name, out, in)
		}
		for g := range 3 {
			for i := range in {
				w[(g*in+i)*in+i] += d[g*in+i]
			}
		}
	}
	return w, bias, nil
}

// sparseWeights expands NAME_weights_float in the 8×4 block layout
// indexed by NAME_weights_idx into w [out, in].
func sparseWeights(byName map[string]Array, name string, w []float32, in, out int) error {
	ia, ok := byName[name+"_weights_idx"]
	if !ok {
		return fmt.Errorf("%w: no %s_weights_idx", ErrNotRNNoise, name)
	}
	idx, err := ia.Ints()
	if err != nil {
		return err
	}
	fa, ok := byName[name+"_weights_float"]
	if !ok {
		return fmt.Errorf("%w: no %s_weights_float", ErrNotRNNoise, name)
	}
	src, err := fa.Floats()
	if err != nil {
		return err
	}
	if out%8 != 0 {
		return fmt.Errorf("%w: %s has %d outputs, not a multiple of 8", ErrNotRNNoise, name, out)
	}
	k, blocks := 0, 0
	for row := 0; row < out; row += 8 {
		if k >= len(idx) {
			return fmt.Errorf("%w: %s_weights_idx ends at row %d", ErrNotRNNoise, name, row)
		}
		n := int(idx[k])
		k++
		if n < 0 || n > in/4 || k+n > len(idx) {
			return fmt.Errorf("%w: %s_weights_idx: %d blocks at row %d", ErrNotRNNoise, name, n, row)
		}
		for range n {
			pos := int(idx[k])
			k++
			if pos < 0 || pos+4 > in {
				return fmt.Errorf("%w: %s_weights_idx: input %d of %d", ErrNotRNNoise, name, pos, in)
			}
			if (blocks+1)*32 > len(src) {
				return fmt.Errorf("%w: %s_weights_float has %d values, too few for its blocks", ErrNotRNNoise, name, len(src))
			}
			blk := src[blocks*32:][:32]
			for c := range 4 {
				for r := range 8 {
					w[(row+r)*in+pos+c] = blk[c*8+r]
				}
			}
			blocks++
		}
	}
	if k != len(idx) || blocks*32 != len(src) {
		return fmt.Errorf("%w: %s: %d of %d index entries and %d of %d weights used", ErrNotRNNoise, name, k, len(idx), blocks*32, len(src))
	}
	return nil
}

// dense makes a float32 matrix [out, in] and its bias a weight.
func dense(name string, data []float32, out, in int, bias []float32) backend.WeightData {
	return backend.WeightData{Name: name, Format: backend.Dense, Out: out, In: in,
		Data: tensor.Tensor{Name: name, DType: tensor.F32, Shape: []int64{int64(out), int64(in)}, Data: tensor.Encode(tensor.F32, data)},
		Bias: &tensor.Tensor{Name: name + ".bias", DType: tensor.F32, Shape: []int64{int64(out)}, Data: tensor.Encode(tensor.F32, bias)}}
}

// Run feeds n = len(features)/Features frames through the network from
// st, which it advances: gains [n·32] and voice probabilities [n], frame
// after frame, as rnnoise's compute_rnn returns them (frames the reference
// skips as silent must not be passed).
func (m *Model) Run(ctx context.Context, st *State, features []float32) (gains, vad []float32, err error) {
	if len(features)%Features != 0 {
		return nil, nil, fmt.Errorf("rnnoise: %d feature values are not whole frames of %d", len(features), Features)
	}
	n := len(features) / Features
	gains = make([]float32, 0, n*Bands)
	vad = make([]float32, 0, n)
	for lo := 0; lo < n; lo += framesPerStep {
		hi := min(n, lo+framesPerStep)
		g, v, err := m.step(ctx, st, features[lo*Features:hi*Features])
		if err != nil {
			return nil, nil, err
		}
		gains = append(gains, g...)
		vad = append(vad, v...)
	}
	return gains, vad, nil
}

// step runs the frames of features on one backend step: each convolution
// on all frames at once (a row each, the three frames it sees side by
// side), each GRU frame after frame, the dense layers on all frames.
func (m *Model) step(ctx context.Context, st *State, features []float32) (gains, vad []float32, err error) {
	s := m.be.NewStep(ctx)
	defer s.Close()
	n := len(features) / Features
	gruGate := s.Input(1, GRUSize, filled(GRUSize, tanhGate)) // one upload for every GRU step
	tanh := func(x backend.Array) backend.Array {
		if x.Rows() == 1 && x.Cols() == GRUSize {
			return s.GatedTanh(x, gruGate)
		}
		return s.GatedTanh(x, s.Input(x.Rows(), x.Cols(), filled(x.Rows()*x.Cols(), tanhGate)))
	}
	// The first convolution's input is built on the host.
	hist := append(append(make([]float32, 0, len(st.conv1)+len(features)), st.conv1...), features...)
	win := make([]float32, n*kernel*Features)
	for t := range n {
		copy(win[t*kernel*Features:], hist[t*Features:(t+kernel)*Features])
	}
	copy(st.conv1, hist[n*Features:])
	c1 := tanh(s.Linear(s.Input(n, kernel*Features, win), m.conv1)) // [n, 128]
	all := s.ConcatRows(s.Input(kernel-1, conv1Out, st.conv2), c1)  // [n+2, 128]
	x := s.Rows(all, span(0, n))
	for k := 1; k < kernel; k++ {
		x = s.HeadConcat(x, s.Rows(all, span(k, k+n)), 1)
	}
	c2 := tanh(s.Linear(x, m.conv2)) // [n, 384]
	cat := c2
	in := c2
	states := make([]backend.Array, len(m.gruIn))
	for g := range m.gruIn {
		gx := s.Linear(in, m.gruIn[g]) // [n, 3·384]: z, r, h
		h := s.Input(1, GRUSize, st.gru[g])
		hs := make([]backend.Array, 0, n)
		for t := range n {
			h = gruStep(s, tanh, m.gruRec[g], s.Rows(gx, []int{t}), h)
			hs = append(hs, h)
		}
		states[g] = h
		in = s.ConcatRows(hs...)
		cat = s.HeadConcat(cat, in, 1)
	}
	gArr := s.Sigmoid(s.Linear(cat, m.dense))
	vArr := s.Sigmoid(s.Linear(cat, m.vad))
	if gains, err = s.Read(gArr); err != nil {
		return nil, nil, err
	}
	if vad, err = s.Read(vArr); err != nil {
		return nil, nil, err
	}
	c2mem, err := s.Read(s.Rows(all, span(n, n+kernel-1)))
	if err != nil {
		return nil, nil, err
	}
	copy(st.conv2, c2mem)
	for g, h := range states {
		v, err := s.Read(h)
		if err != nil {
			return nil, nil, err
		}
		copy(st.gru[g], v)
	}
	return gains, vad, nil
}

// gruStep is one step of RNNoise's GRU (nnet.c's compute_generic_gru,
// the reset gate applied after the recurrent product): with gx = W·x + b
// and gh = U·h + c split into gates z, r, h,
// z, r = σ(gx_zr + gh_zr), c = tanh(gx_h + r·gh_h), h' = c + z·(h − c).
func gruStep(s backend.Step, tanh func(backend.Array) backend.Array, rec backend.Weight, gx, h backend.Array) backend.Array {
	const n = GRUSize
	gh := s.Linear(h, rec)
	zr := s.Sigmoid(s.Add(s.HeadSlice(gx, 1, 0, 2*n), s.HeadSlice(gh, 1, 0, 2*n)))
	z, r := s.HeadSlice(zr, 1, 0, n), s.HeadSlice(zr, 1, n, 2*n)
	c := tanh(s.Gate(s.HeadSlice(gx, 1, 2*n, 3*n), s.HeadSlice(gh, 1, 2*n, 3*n), r))
	return s.Gate(c, s.Add(h, s.Scale(c, -1)), z)
}

func span(lo, hi int) []int {
	out := make([]int, hi-lo)
	for i := range out {
		out[i] = lo + i
	}
	return out
}

func filled(n int, v float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = v
	}
	return out
}
