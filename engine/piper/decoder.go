package piper

import (
	"fmt"
	"slices"

	"fusion/engine/backend"
	"fusion/engine/onnx"
	"fusion/engine/tensor"
)

// conv1d is a convolution of the graph, with the hyper-parameters of its
// ONNX node (kernel, dilation, padding, stride). Undilated convolutions
// run as one Step.Conv1D, same-padded dilated ones as one Conv1D over
// their phases (dilatedByPhases); other dilated ones as one Linear per tap over shifted
// rows (Step.Rows over the input with a zero row appended for the taps
// past the ends), summed; transposed ones by phases (see run).
type conv1d struct {
	name                  string
	in, out               int
	kernel, dilation, pad int
	stride                int
	transposed            bool
	whole                 backend.Weight   // undilated, untransposed
	taps                  []backend.Weight // [out, in] per tap; the bias on the first (on the first stride taps when transposed)
	parts                 []backend.Weight // whole, split by output channels (nodeConv's split)
}

// ints returns a node's integer-list attribute, or def when absent.
func ints(n *onnx.Node, name string, def ...int64) []int64 {
	if a, ok := n.Attr(name); ok && len(a.Ints) > 0 {
		return a.Ints
	}
	return def
}

// nodeConv loads the Conv or ConvTranspose node called name. With split
// > 0 an undilated convolution is uploaded as two weights of split output
// channels each (parts), for WaveNet's gate halves and res/skip outputs.
func (l *loader) nodeConv(name string, split int) *conv1d {
	if l.Err() != nil {
		return nil
	}
	var node *onnx.Node
	for i := range l.g.Nodes {
		if l.g.Nodes[i].Name == name {
			node = &l.g.Nodes[i]
			break
		}
	}
	if node == nil || (node.OpType != "Conv" && node.OpType != "ConvTranspose") || len(node.Inputs) < 2 {
		l.Fail(fmt.Errorf("%w: no convolution node %s", ErrNotPiper, name))
		return nil
	}
	w, ok := l.g.Initializer(node.Inputs[1])
	if !ok || w.DType != tensor.F32 || len(w.Shape) != 3 {
		l.Fail(fmt.Errorf("%w: %s: weight %s missing or not F32 [out, in, k]", ErrNotPiper, name, node.Inputs[1]))
		return nil
	}
	var bias *tensor.Tensor
	if len(node.Inputs) > 2 && node.Inputs[2] != "" {
		b, ok := l.g.Initializer(node.Inputs[2])
		if !ok || b.DType != tensor.F32 {
			l.Fail(fmt.Errorf("%w: %s: bias %s missing", ErrNotPiper, name, node.Inputs[2]))
			return nil
		}
		bias = &b
	}
	c := &conv1d{name: name, transposed: node.OpType == "ConvTranspose", kernel: int(w.Shape[2])}
	pads := ints(node, "pads", 0, 0)
	c.dilation = int(ints(node, "dilations", 1)[0])
	c.stride = int(ints(node, "strides", 1)[0])
	c.pad = int(pads[0])
	group := int64(1)
	if a, ok := node.Attr("group"); ok && a.I != 0 {
		group = a.I
	}
	if len(pads) != 2 || pads[0] != pads[1] || group != 1 || c.dilation < 1 || c.stride < 1 ||
		(c.transposed && (c.dilation != 1 || (c.kernel-2*c.pad) != c.stride)) || (!c.transposed && c.stride != 1) {
		l.Fail(fmt.Errorf("%w: %s: unsupported convolution (pads %v, dilation %d, stride %d, group %d, kernel %d)",
			ErrNotPiper, name, pads, c.dilation, c.stride, group, c.kernel))
		return nil
	}
	if c.transposed {
		c.in, c.out = int(w.Shape[0]), int(w.Shape[1])
	} else {
		c.out, c.in = int(w.Shape[0]), int(w.Shape[1])
	}
	if bias != nil && (len(bias.Shape) != 1 || int(bias.Shape[0]) != c.out) {
		l.Fail(fmt.Errorf("%w: %s: bias of shape %v", ErrNotPiper, name, bias.Shape))
		return nil
	}
	if !c.transposed && (c.dilation == 1 && c.pad < c.kernel || split == 0 && c.samePhases()) {
		d, err := backend.ConvData(name, w, bias)
		if err != nil {
			l.Fail(err)
			return nil
		}
		if split == 0 {
			c.whole = l.Weight(d)
			return c
		}
		if c.out != 2*split {
			l.Fail(fmt.Errorf("%w: %s: cannot split %d channels at %d", ErrNotPiper, name, c.out, split))
			return nil
		}
		for i := range 2 {
			part, err := backend.RowRange(d, i*split, (i+1)*split)
			if err != nil {
				l.Fail(err)
				return nil
			}
			c.parts = append(c.parts, l.Weight(part))
		}
		return c
	}
	if split > 0 {
		l.Fail(fmt.Errorf("%w: %s: cannot split a dilated or transposed convolution", ErrNotPiper, name))
		return nil
	}
	src, err := tensor.Floats(w)
	if err != nil {
		l.Fail(err)
		return nil
	}
	for _, d := range c.tapData(src, bias) {
		c.taps = append(c.taps, l.Weight(d))
	}
	return c
}

// tapData splits the convolution's weight src ([out, in, k], or [in,
// out, k] when transposed) into one [out, in] matrix per tap, the bias on
// the first (on the first stride taps when transposed).
func (c *conv1d) tapData(src []float32, bias *tensor.Tensor) []backend.WeightData {
	var taps []backend.WeightData
	for j := range c.kernel {
		tap := make([]float32, c.out*c.in)
		for o := range c.out {
			for i := range c.in {
				if c.transposed { // [in, out, k]
					tap[o*c.in+i] = src[(i*c.out+o)*c.kernel+j]
				} else { // [out, in, k]
					tap[o*c.in+i] = src[(o*c.in+i)*c.kernel+j]
				}
			}
		}
		d := backend.WeightData{Name: fmt.Sprintf("%s/tap%d", c.name, j), Format: backend.Dense, Out: c.out, In: c.in,
			Data: tensor.Tensor{DType: tensor.F32, Shape: []int64{int64(c.out), int64(c.in)}, Data: tensor.Encode(tensor.F32, tap)}}
		if bias != nil && (j == 0 || (c.transposed && j < c.stride)) {
			d.Bias = bias
		}
		taps = append(taps, d)
	}
	return taps
}

// samePhases says whether a dilated convolution keeps the length
// ("same" padding, 2·pad = dilation·(kernel−1), HiFi-GAN's get_padding)
// and so runs as one undilated Conv1D over its input's phases (see
// dilatedByPhases).
func (c *conv1d) samePhases() bool {
	return !c.transposed && c.dilation > 1 && c.kernel%2 == 1 && 2*c.pad == c.dilation*(c.kernel-1)
}

// dilatedByPhases applies a same-padded convolution of dilation d to x
// [n, in] as one undilated Conv1D. Output row q·d + r reads only rows
// ≡ r (mod d) of x, at phase offsets q + j − p (p = pad/d): it is row q
// of the undilated, p-padded convolution of phase r, x_r = x[r], x[r+d],
// … So the phases are gathered one after another with p zero rows
// between them (the padding each phase's ends read, shared by the two
// neighbours), convolved at once, and the outputs gathered back in time
// order. Same sums as one Linear per tap, in one product instead of
// kernel products, shifted copies and adds.
func (c *conv1d) dilatedByPhases(s backend.Step, x backend.Array) backend.Array {
	n, d, p := x.Rows(), c.dilation, c.pad/c.dilation
	padded := s.ConcatRows(x, s.Input(1, c.in, make([]float32, c.in)))
	var idx []int
	start := make([]int, d) // row of phase r's first row in the gathered array
	for r := range d {
		if r > 0 {
			for range p {
				idx = append(idx, n) // the zero row
			}
		}
		start[r] = len(idx)
		for t := r; t < n; t += d {
			idx = append(idx, t)
		}
	}
	y := s.Conv1D(s.Rows(padded, idx), c.whole, c.kernel, 1, p)
	back := make([]int, n)
	for t := range n {
		back[t] = start[t%d] + t/d
	}
	return s.Rows(y, back)
}

// shifted returns rows src[t] of x for each t (a zero row where src[t] is
// out of range), from x with a zero row appended.
func shifted(s backend.Step, padded backend.Array, n int, src func(t int) int, rows int) backend.Array {
	idx := make([]int, rows)
	for t := range rows {
		i := src(t)
		if i < 0 || i >= n {
			i = n
		}
		idx[t] = i
	}
	return s.Rows(padded, idx)
}

// run applies the convolution to x [T, in].
func (c *conv1d) run(s backend.Step, x backend.Array) backend.Array {
	if c.whole != nil && c.dilation > 1 {
		return c.dilatedByPhases(s, x)
	}
	if c.whole != nil {
		return s.Conv1D(x, c.whole, c.kernel, 1, c.pad)
	}
	n := x.Rows()
	padded := s.ConcatRows(x, s.Input(1, c.in, make([]float32, c.in)))
	if !c.transposed {
		rows := n + 2*c.pad - c.dilation*(c.kernel-1)
		var acc backend.Array
		for j, tap := range c.taps {
			off := j*c.dilation - c.pad
			y := s.Linear(shifted(s, padded, n, func(t int) int { return t + off }, rows), tap)
			if acc == nil {
				acc = y
			} else {
				acc = s.Add(acc, y)
			}
		}
		return acc
	}
	// Transposed, stride u, kernel K = u + 2·pad: output row o = q·u + r
	// gets Σ_m x[q + c_r − m]·W_{j0+m·u} over the taps j0 + m·u < K, with
	// j0 = (r + pad) mod u and c_r = (r + pad) div u. Each phase r is a
	// small convolution over x; the phases are then interleaved.
	u := c.stride
	phases := make([]backend.Array, u)
	for r := range u {
		j0, cr := (r+c.pad)%u, (r+c.pad)/u
		var acc backend.Array
		for m := 0; j0+m*u < c.kernel; m++ {
			off := cr - m
			y := s.Linear(shifted(s, padded, n, func(q int) int { return q + off }, n), c.taps[j0+m*u])
			if acc == nil {
				acc = y
			} else {
				acc = s.Add(acc, y)
			}
		}
		phases[r] = acc
	}
	all := s.ConcatRows(phases...)
	idx := make([]int, n*u)
	for q := range n {
		for r := range u {
			idx[q*u+r] = r*n + q
		}
	}
	return s.Rows(all, idx)
}

// coupling is one residual coupling layer of the flow (mean only): WaveNet
// over the first half of the channels predicts a shift of the second.
type coupling struct {
	pre, post backend.Weight
	in        []*conv1d // per WaveNet layer: in_layers, split into the tanh and sigmoid halves
	resSkip   []*conv1d // per layer: split into res and skip, but the last (all skip)
}

type generator struct {
	pre, post *conv1d
	ups       []*conv1d
	resblocks [][][]*conv1d // [stage][kernel][conv]
}

// wnLayers is the WaveNet depth of Piper's flows.
const wnLayers = 4

func (l *loader) loadFlowAndDecoder() {
	v := l.v
	h := v.Dims.Hidden
	half := h / 2
	for _, f := range []int{6, 4, 2, 0} {
		p := fmt.Sprintf("flow.flows.%d", f)
		c := coupling{pre: l.conv(p+".pre", h, half, 1), post: l.conv(p+".post", half, h, 1)}
		for i := range wnLayers {
			split := h
			if i == wnLayers-1 {
				split = 0
			}
			c.in = append(c.in, l.nodeConv(fmt.Sprintf("/flow/flows.%d/enc/in_layers.%d/Conv", f, i), h))
			c.resSkip = append(c.resSkip, l.nodeConv(fmt.Sprintf("/flow/flows.%d/enc/res_skip_layers.%d/Conv", f, i), split))
		}
		v.flow = append(v.flow, c)
	}
	g := &v.dec
	g.pre = l.nodeConv("/dec/conv_pre/Conv", 0)
	g.post = l.nodeConv("/dec/conv_post/Conv", 0)
	for i := 0; ; i++ {
		name := fmt.Sprintf("/dec/ups.%d/ConvTranspose", i)
		if !slices.ContainsFunc(l.g.Nodes, func(n onnx.Node) bool { return n.Name == name }) {
			break
		}
		g.ups = append(g.ups, l.nodeConv(name, 0))
	}
	per := 0
	for i := 0; ; i++ {
		if _, ok := l.g.Initializer(fmt.Sprintf("dec.resblocks.%d.convs.0.weight", i)); !ok {
			per = i
			break
		}
	}
	if len(g.ups) == 0 || per%len(g.ups) != 0 {
		l.Fail(fmt.Errorf("%w: %d upsampling stages and %d residual blocks", ErrNotPiper, len(g.ups), per))
		return
	}
	k := per / len(g.ups)
	for st := range g.ups {
		var stage [][]*conv1d
		for j := range k {
			b := st*k + j
			stage = append(stage, []*conv1d{
				l.nodeConv(fmt.Sprintf("/dec/resblocks.%d/convs.0/Conv", b), 0),
				l.nodeConv(fmt.Sprintf("/dec/resblocks.%d/convs.1/Conv", b), 0),
			})
		}
		g.resblocks = append(g.resblocks, stage)
	}
}
