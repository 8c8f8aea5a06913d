package silero

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"fusion/engine/backend"
	"fusion/engine/onnx"
	"fusion/engine/tensor"
)

// The network's fixed sizes (Silero VAD's 16 kHz branch).
const (
	SampleRate = 16000
	// ChunkSamples is the audio one probability covers.
	ChunkSamples = 512
	// ContextSamples of the previous chunk go before each chunk.
	ContextSamples = 64
	frameLen       = 256 // STFT window (the basis's kernel)
	hop            = 128 // STFT stride
	frames         = 4   // STFT frames of a chunk
	// windowSamples are a chunk's samples as the STFT reads them: the
	// context, the chunk, and 64 samples of the right reflect padding.
	windowSamples = ContextSamples + ChunkSamples + hop/2
	hidden        = 128 // LSTM width
	// chunksPerStep bounds one backend step: the chunks whose arrays live
	// together before their probabilities are read and the state carried
	// to the next step.
	chunksPerStep = 64
)

// ErrNotSilero is wrapped when a directory or file is not a Silero VAD
// graph this package can run.
var ErrNotSilero = errors.New("silero: not a supported Silero VAD model")

// FilePrefix starts the name of the ONNX file of a Silero VAD model
// directory (silero_vad.onnx, silero_vad_v6.onnx).
const FilePrefix = "silero_vad"

// IsModelDir reports whether dir holds one *.onnx, named silero_vad*.onnx,
// and no Piper config beside it. It reads no weights.
func IsModelDir(dir string) bool {
	path, err := modelFile(dir)
	return err == nil && path != ""
}

func modelFile(dir string) (string, error) {
	models, _ := filepath.Glob(filepath.Join(dir, "*.onnx"))
	if len(models) != 1 || !strings.HasPrefix(filepath.Base(models[0]), FilePrefix) {
		return "", fmt.Errorf("%w: %s holds %d .onnx files, want one %s*.onnx", ErrNotSilero, dir, len(models), FilePrefix)
	}
	if _, err := os.Stat(models[0] + ".json"); err == nil {
		return "", fmt.Errorf("%w: %s has a Piper voice config", ErrNotSilero, models[0])
	}
	return models[0], nil
}

// Model is a loaded Silero VAD network.
type Model struct {
	be      backend.Backend
	weights []backend.Weight
	bytes   int64

	// The encoder sees one chunk (640 samples with context and padding)
	// at a time, so each of its convolutions is a linear map of the whole
	// chunk: the STFT to [re of 4 frames | im of 4 frames], then the four
	// convolutions, each a [framesOut·out, framesIn·in] matrix (frame-major
	// rows and columns). The chunks of a step are then rows of one Linear.
	stft    backend.Weight   // [2·4·129, 640]
	convs   []backend.Weight // [4·128, 4·129], [2·64, 4·128], [64, 2·64], [128, 64]
	lstmX   backend.Weight   // [4H, H], gates i f g o, with both biases
	lstmH   backend.Weight   // [4H, H], no bias
	decoder backend.Weight   // [1, H] with its bias
}

// Load reads the model in dir (one silero_vad*.onnx) onto be.
func Load(ctx context.Context, dir string, be backend.Backend) (*Model, error) {
	path, err := modelFile(dir)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	g, err := onnx.Open(path)
	if err != nil {
		return nil, err
	}
	m := &Model{be: be}
	if err := m.load(g); err != nil {
		m.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
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

func (m *Model) upload(d backend.WeightData) (backend.Weight, error) {
	w, err := m.be.Weight(d)
	if err != nil {
		return nil, err
	}
	m.weights = append(m.weights, w)
	m.bytes += w.Bytes()
	return w, nil
}

// f32 returns the F32 initializer called name with the given shape.
func f32(g *onnx.Model, name string, shape ...int64) (tensor.Tensor, error) {
	t, ok := g.Initializer(name)
	if !ok {
		return t, fmt.Errorf("%w: no weight %s", ErrNotSilero, name)
	}
	good := t.DType == tensor.F32 && len(t.Shape) == len(shape)
	for i := 0; good && i < len(shape); i++ {
		good = t.Shape[i] == shape[i]
	}
	if !good {
		return t, fmt.Errorf("%w: %s is %v %v, want F32 %v", ErrNotSilero, name, t.DType, t.Shape, shape)
	}
	return t, nil
}

// node returns the graph's node called name, checked to be an op.
func node(g *onnx.Model, name, op string) (*onnx.Node, error) {
	for i := range g.Nodes {
		if g.Nodes[i].Name == name {
			if g.Nodes[i].OpType != op {
				break
			}
			return &g.Nodes[i], nil
		}
	}
	return nil, fmt.Errorf("%w: no %s node %s", ErrNotSilero, op, name)
}

// ints returns an INTS attribute of n (nil when it is absent).
func ints(n *onnx.Node, name string) []int64 {
	a, _ := n.Attr(name)
	return a.Ints
}

// checkConv wants the Conv node name to have the given kernel, stride and
// symmetric padding, no dilation and one group.
func checkConv(g *onnx.Model, name string, kernel, stride, pad int64) error {
	n, err := node(g, name, "Conv")
	if err != nil {
		return err
	}
	k, s, p, d := ints(n, "kernel_shape"), ints(n, "strides"), ints(n, "pads"), ints(n, "dilations")
	grp, hasGroup := n.Attr("group")
	ok := len(k) == 1 && k[0] == kernel && len(s) == 1 && s[0] == stride &&
		len(p) == 2 && p[0] == pad && p[1] == pad && (len(d) == 0 || len(d) == 1 && d[0] == 1) && (!hasGroup || grp.I == 1)
	if !ok {
		return fmt.Errorf("%w: %s has kernel %v, strides %v, pads %v, dilations %v; want %d, %d, %d",
			ErrNotSilero, name, k, s, p, d, kernel, stride, pad)
	}
	return nil
}

func (m *Model) load(g *onnx.Model) error {
	const bins = frameLen/2 + 1
	// The STFT: Conv(stride 128) with the [258, 1, 256] basis over the
	// chunk reflect-padded by 128 on each side, of which the first frame
	// is dropped (the Slices from time 1), so the left padding is never
	// read and the right padding needs only 64 samples.
	if err := checkConv(g, "/encoder/feature_extractor/Conv", frameLen, hop, 0); err != nil {
		return err
	}
	padNode, err := node(g, "/encoder/feature_extractor/padding/Pad", "Pad")
	if err != nil {
		return err
	}
	mode, _ := padNode.Attr("mode")
	pad, ok := g.NodeInput(padNode.Name, 1)
	if string(mode.S) != "reflect" || !ok || pad.DType != tensor.I64 || len(pad.Data) != 32 ||
		!equalInts(pad.Data, 0, hop, 0, hop) {
		return fmt.Errorf("%w: the STFT's padding is not reflect 128 on both sides", ErrNotSilero)
	}
	basis, e := f32(g, "encoder.feature_extractor.forward_basis_buffer", 2*bins, 1, frameLen)
	if e != nil {
		return e
	}
	if m.stft, e = m.upload(dense("stft", stftMatrix(floats(basis), bins), 2*frames*bins, windowSamples, nil)); e != nil {
		return e
	}
	// The encoder: four convolutions, kernel 3, padding 1.
	in, t := int64(bins), frames
	for i, c := range []struct{ out, stride int64 }{{128, 1}, {64, 2}, {64, 2}, {128, 1}} {
		name := fmt.Sprintf("encoder.conv_layers.%d", i)
		if e := checkConv(g, fmt.Sprintf("/encoder/conv_layers.%d/Conv", i), 3, c.stride, 1); e != nil {
			return e
		}
		w, e := f32(g, name+".weight", c.out, in, 3)
		if e != nil {
			return e
		}
		b, e := f32(g, name+".bias", c.out)
		if e != nil {
			return e
		}
		mat, bias, tOut := convMatrix(floats(w), floats(b), int(c.out), int(in), 3, int(c.stride), 1, t)
		up, e := m.upload(dense(name, mat, tOut*int(c.out), t*int(in), bias))
		if e != nil {
			return e
		}
		m.convs = append(m.convs, up)
		in, t = c.out, tOut
	}
	if in != hidden || t != 1 {
		return fmt.Errorf("%w: the encoder ends at %d frames of width %d, want 1 of %d", ErrNotSilero, t, in, hidden)
	}
	// The LSTM: ONNX's W, R [1, 4H, H] in gate order i, o, f, c and
	// B [1, 8H] (W's biases, then R's).
	lstm, e := node(g, "/decoder/rnn/LSTM", "LSTM")
	if e != nil {
		return e
	}
	if a, ok := lstm.Attr("hidden_size"); !ok || a.I != hidden || len(lstm.Inputs) < 4 {
		return fmt.Errorf("%w: the LSTM is not one layer of %d units", ErrNotSilero, hidden)
	}
	if a, ok := lstm.Attr("direction"); ok && string(a.S) != "forward" {
		return fmt.Errorf("%w: a %s LSTM", ErrNotSilero, a.S)
	}
	W, e := f32(g, lstm.Inputs[1], 1, 4*hidden, hidden)
	if e != nil {
		return e
	}
	R, e := f32(g, lstm.Inputs[2], 1, 4*hidden, hidden)
	if e != nil {
		return e
	}
	B, e := f32(g, lstm.Inputs[3], 1, 8*hidden)
	if e != nil {
		return e
	}
	wf, rf, bf := floats(W), floats(R), floats(B)
	bias := make([]float32, 4*hidden)
	for i := range bias {
		bias[i] = bf[i] + bf[4*hidden+i]
	}
	if m.lstmX, e = m.upload(dense("lstm.W", reorderGates(wf), 4*hidden, hidden, reorderGates(bias))); e != nil {
		return e
	}
	if m.lstmH, e = m.upload(dense("lstm.R", reorderGates(rf), 4*hidden, hidden, nil)); e != nil {
		return e
	}
	// The decoder: ReLU, Conv(kernel 1) to one channel, sigmoid.
	if e := checkConv(g, "/decoder/conv1d/Conv", 1, 1, 0); e != nil {
		return e
	}
	dw, e := f32(g, "decoder.conv1d.weight", 1, hidden, 1)
	if e != nil {
		return e
	}
	db, e := f32(g, "decoder.conv1d.bias", 1)
	if e != nil {
		return e
	}
	d, e := backend.ConvData("decoder", dw, &db)
	if e != nil {
		return e
	}
	m.decoder, e = m.upload(d)
	return e
}

// stftMatrix is the STFT of a 640-sample window as one matrix: row
// f·bins + k is the real part of bin k of frame f (frames at 0, 128, 256
// and 384), row (frames+f)·bins + k its imaginary part; basis is the
// graph's [2·bins, 1, 256] (cosine rows, then sine rows).
func stftMatrix(basis []float32, bins int) []float32 {
	out := make([]float32, 2*frames*bins*windowSamples)
	for part := range 2 {
		for f := range frames {
			for k := range bins {
				row := out[((part*frames+f)*bins+k)*windowSamples:][:windowSamples]
				copy(row[f*hop:f*hop+frameLen], basis[(part*bins+k)*frameLen:][:frameLen])
			}
		}
	}
	return out
}

// convMatrix is a 1-D convolution (PyTorch weight w [out, in, k], bias b)
// over tIn frames with zero padding, as one matrix [tOut·out, tIn·in] and
// its bias [tOut·out], rows and columns frame-major: the convolution of a
// fixed-length input is a linear map of it.
func convMatrix(w, b []float32, out, in, k, stride, pad, tIn int) (mat, bias []float32, tOut int) {
	tOut = (tIn+2*pad-k)/stride + 1
	cols := tIn * in
	mat = make([]float32, tOut*out*cols)
	bias = make([]float32, 0, tOut*out)
	for t := range tOut {
		for o := range out {
			row := mat[(t*out+o)*cols:][:cols]
			for j := range k {
				u := t*stride + j - pad
				if u < 0 || u >= tIn {
					continue
				}
				for c := range in {
					row[u*in+c] = w[(o*in+c)*k+j]
				}
			}
		}
		bias = append(bias, b...)
	}
	return mat, bias, tOut
}

// equalInts reports whether b holds the little-endian int64s want.
func equalInts(b []byte, want ...int64) bool {
	for i, w := range want {
		if int64(binary.LittleEndian.Uint64(b[8*i:])) != w {
			return false
		}
	}
	return true
}

func floats(t tensor.Tensor) []float32 {
	out := make([]float32, len(t.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out
}

// reorderGates moves the four equal gate blocks of x from ONNX's order
// i, o, f, c to PyTorch's i, f, g, o that Step.LSTMCell takes.
func reorderGates(x []float32) []float32 {
	block := len(x) / 4
	out := make([]float32, 0, len(x))
	for _, g := range []int{0, 2, 3, 1} {
		out = append(out, x[g*block:(g+1)*block]...)
	}
	return out
}

// dense makes a float32 matrix [out, in] (with an optional bias) a
// weight.
func dense(name string, data []float32, out, in int, bias []float32) backend.WeightData {
	d := backend.WeightData{Name: name, Format: backend.Dense, Out: out, In: in,
		Data: tensor.Tensor{Name: name, DType: tensor.F32, Shape: []int64{int64(out), int64(in)}, Data: bytesOf(data)}}
	if bias != nil {
		d.Bias = &tensor.Tensor{Name: name + ".bias", DType: tensor.F32, Shape: []int64{int64(out)}, Data: bytesOf(bias)}
	}
	return d
}

func bytesOf(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// State is the LSTM's state between chunks and the last chunk's tail,
// the context of the next one. The zero value starts a stream.
type State struct {
	h, c    []float32
	context []float32
}

// Probs returns one speech probability per 512-sample chunk of x (16 kHz
// mono; a final partial chunk is padded with zeros), as faster-whisper's
// SileroVADModel does: each chunk sees the previous chunk's last 64
// samples, and the LSTM state runs from the first chunk to the last.
func (m *Model) Probs(ctx context.Context, x []float32) ([]float32, error) {
	var st State
	return m.Stream(ctx, &st, x)
}

// Stream is Probs continuing from st, which it updates: audio cut into
// pieces of whole chunks gives the probabilities of the whole.
func (m *Model) Stream(ctx context.Context, st *State, x []float32) ([]float32, error) {
	n := (len(x) + ChunkSamples - 1) / ChunkSamples
	if st.h == nil {
		st.h, st.c = make([]float32, hidden), make([]float32, hidden)
		st.context = make([]float32, ContextSamples)
	}
	out := make([]float32, 0, n)
	for lo := 0; lo < n; lo += chunksPerStep {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hi := min(n, lo+chunksPerStep)
		p, err := m.step(ctx, st, x, lo, hi)
		if err != nil {
			return nil, err
		}
		out = append(out, p...)
	}
	return out, nil
}

// window is chunk i of x with its context before it and the 64 samples
// the STFT's reflect padding adds after it: 640 samples, of which the
// STFT reads frames at 0, 128, 256 and 384.
func window(dst, ctxTail, x []float32, i int) {
	copy(dst, ctxTail)
	chunk := dst[ContextSamples : ContextSamples+ChunkSamples]
	clear(chunk)
	if lo := i * ChunkSamples; lo < len(x) {
		copy(chunk, x[lo:min(len(x), lo+ChunkSamples)])
	}
	in := dst[:ContextSamples+ChunkSamples] // the network's 576-sample input
	for j := range hop / 2 {
		dst[len(in)+j] = in[len(in)-2-j]
	}
}

// step runs chunks [lo, hi) of x on one backend step: the encoder on all
// of them at once (a row each), then the LSTM chunk after chunk, then the
// decoder on all of them.
func (m *Model) step(ctx context.Context, st *State, x []float32, lo, hi int) ([]float32, error) {
	s := m.be.NewStep(ctx)
	defer s.Close()
	n := hi - lo
	win := make([]float32, n*windowSamples)
	for i := range n {
		w := win[i*windowSamples:][:windowSamples]
		window(w, st.context, x, lo+i)
		copy(st.context, w[ChunkSamples:ContextSamples+ChunkSamples])
	}
	y := s.ComplexAbs(s.Linear(s.Input(n, windowSamples, win), m.stft)) // [n, 4·129]
	for _, c := range m.convs {
		y = s.ReLU(s.Linear(y, c))
	} // [n, 128]
	gx := s.Linear(y, m.lstmX) // [n, 4H]
	h, c := s.Input(1, hidden, st.h), s.Input(1, hidden, st.c)
	var state backend.Array
	hs := make([]backend.Array, 0, n)
	for i := range n {
		state = s.LSTMCell(s.Add(s.Rows(gx, []int{i}), s.Linear(h, m.lstmH)), c)
		h, c = s.HeadSlice(state, 1, 0, hidden), s.HeadSlice(state, 1, hidden, 2*hidden)
		hs = append(hs, h)
	}
	probs := s.Sigmoid(s.Linear(s.ReLU(s.ConcatRows(hs...)), m.decoder))
	p, err := s.Read(probs)
	if err != nil {
		return nil, err
	}
	sv, err := s.Read(state)
	if err != nil {
		return nil, err
	}
	copy(st.h, sv[:hidden])
	copy(st.c, sv[hidden:])
	return p, nil
}
