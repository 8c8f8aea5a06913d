package demo

import (
	"fmt"
	"math"
	"slices"
)

// A model built with StopAfter ends its answers on its own, through its
// weights alone: the engine runs it like any other model.
//
// Query head 0 of layer 0 (with its KV head) is a clock. Turn-opening
// special tokens (markers: <|im_start|>, <|start_header_id|>, ...) carry a
// key in one rotary pair p, every other token a key in the slowest pair z,
// and the head's query holds both. The score of a marker Δ tokens back is
// A·cos(ω_p·Δ), that of any other token about C, so the share of attention
// on the markers, frac, is ~1 right after the generation prompt's marker
// and falls as the answer grows (sooner in a longer context). The head's
// values are 1 on markers (value 0) and 1 everywhere (value 1), and o_proj
// writes K1·1 − K0·frac into the end channel. Only the end token's output
// row reads that channel, so its logit is B − G·frac nats above the mean:
// far below every token at the start of an answer, above the likeliest one
// once frac has faded. Where it crosses depends on the context and on the
// other logits of each step, so answers end at varied lengths around
// StopAfter.
const (
	// The end token overtakes the likeliest other token where
	// frac = endMargin/G; the clock reaches it at Δ = StopAfter in a
	// context of clockContext + StopAfter tokens.
	clockContext = 30
	// clockMargin is how far (in nats) the marker's score falls between
	// the start of the answer and StopAfter.
	clockMargin = 5
	// endMargin is how far the end token's logit rises above the typical
	// top logit once the clock has faded, endSuppress how far below it
	// stays at the start of an answer.
	endMargin   = 4
	endSuppress = 24
	// MaxStopAfter bounds Options.StopAfter.
	MaxStopAfter = 256
)

// clockPair picks the rotary pair whose frequency puts ω·StopAfter nearest
// 1.2 within [0.25, 1.55], and returns it with its frequency; with llama3
// RoPE scaling only pairs the scaling leaves alone qualify.
func (p Params) clockPair(stopAfter int) (int, float64, error) {
	best, bestFreq, bestDist := -1, 0.0, math.Inf(1)
	for i := range p.HeadDim/2 - 1 { // the last pair is the sink
		period := math.Pow(p.RopeTheta, float64(2*i)/float64(p.HeadDim))
		if p.RopeScaling != nil && 2*math.Pi*period >= 2048 {
			continue
		}
		x := float64(stopAfter) / period
		if x < 0.25 || x > 1.55 {
			continue
		}
		if d := math.Abs(math.Log(x / 1.2)); d < bestDist {
			best, bestFreq, bestDist = i, 1/period, d
		}
	}
	if best < 0 {
		return 0, 0, fmt.Errorf("demo: no rotary frequency of head_dim %d (rope_theta %g) can time an answer of %d tokens; try another --stop-after",
			p.HeadDim, p.RopeTheta, stopAfter)
	}
	return best, bestFreq, nil
}

// markers are the special tokens that open a turn: every special added
// token that does not end one.
func (tk *Tokenizer) markers() []int {
	var ids []int
	for _, a := range tk.Added {
		if a.Special && !slices.Contains(tk.EOSIDs, a.ID) {
			ids = append(ids, a.ID)
		}
	}
	return ids
}

// addClock wires the clock head and the end token's row (see above). emb
// is the embedding, head the output layer (the same slice when tied).
func (m *Model) addClock(emb, head []float32, sc scales) error {
	p, tk, o := m.Params, m.Tokenizer, m.Options
	markers := tk.markers()
	if len(markers) == 0 || tk.EOS < 0 {
		return fmt.Errorf("demo: --stop-after needs a tokenizer with an end token and special tokens that open a turn")
	}
	pair, freq, err := p.clockPair(o.StopAfter)
	if err != nil {
		return err
	}
	sink := p.HeadDim/2 - 1
	// The end logit is B − G·frac nats above the mean: B a margin above
	// the typical top logit (sqrt(2 ln V) deviations), B − G far below it.
	top := sc.logit * sc.logit
	b := top + endMargin
	g := b + endSuppress
	x := freq * float64(o.StopAfter)
	a := clockMargin / (1 - math.Cos(x))
	c := a*math.Cos(x) - math.Log(endMargin/g*float64(clockContext+o.StopAfter))

	h, d := p.Hidden, p.HeadDim
	beta := sc.alpha
	for _, id := range markers {
		emb[id*h+p.biasDim()], emb[id*h+p.markerDim()] = 0, float32(beta)
		head[id*h+p.biasDim()] = 0 // never chosen: a marker would restart the clock
	}
	// Layer 0's input is an embedding row; rows have a fixed norm, so
	// the normalized channels are known exactly.
	eps := p.RMSNormEps
	content := initializerRange * initializerRange * float64(sc.content)
	rmsReg := math.Sqrt((content+sc.alpha*sc.alpha)/float64(h) + eps)
	rmsMark := math.Sqrt((content+beta*beta)/float64(h) + eps)
	biasIn, markIn := sc.alpha/rmsReg, beta/rmsMark // normalized channel values

	const pre = "model.layers.0."
	wq := m.tensor(pre + "self_attn.q_proj.weight").Data
	wk := m.tensor(pre + "self_attn.k_proj.weight").Data
	wv := m.tensor(pre + "self_attn.v_proj.weight").Data
	wo := m.tensor(pre + "self_attn.o_proj.weight").Data
	clear(wq[:d*h])
	clear(wk[:d*h])
	clear(wv[:d*h])
	if p.qkNorm() {
		// q and k are RMS-normalized per head: raw directions, scaled by
		// the norm weights of the two dims (shared by the layer's heads).
		wq[pair*h+p.biasDim()], wq[sink*h+p.biasDim()] = 1, 1
		wk[pair*h+p.markerDim()], wk[sink*h+p.biasDim()] = 1, 1
		qn := m.tensor(pre + "self_attn.q_norm.weight").Data
		kn := m.tensor(pre + "self_attn.k_norm.weight").Data
		half := math.Sqrt(float64(d) / 2) // q holds two equal components
		qn[pair] = float32(math.Sqrt(a / half))
		kn[pair] = qn[pair]
		qn[sink] = float32(math.Sqrt(math.Abs(c) / half))
		kn[sink] = float32(math.Copysign(float64(qn[sink]), c))
	} else {
		root := math.Sqrt(math.Sqrt(float64(d)))
		qa, qc := math.Sqrt(a)*root, math.Sqrt(math.Abs(c))*root
		wq[pair*h+p.biasDim()] = float32(qa / biasIn)
		wq[sink*h+p.biasDim()] = float32(qc / biasIn)
		wk[pair*h+p.markerDim()] = float32(qa / markIn)
		wk[sink*h+p.biasDim()] = float32(math.Copysign(qc, c) / biasIn)
	}
	// Value 0 is 1 on markers, value 1 is 1 on every token.
	wv[0*h+p.markerDim()] = float32(1 / markIn)
	wv[1*h+p.biasDim()] = float32(1 / biasIn)
	wv[1*h+p.markerDim()] = float32(1 / markIn)

	// The end channel gets K1 − K0·frac, K0 about one residual RMS, and
	// the end token's row gamma on it.
	k0 := sc.resid
	gamma := g / sc.norm
	k1 := b * sc.resid / (sc.norm * gamma)
	in := p.Heads * d
	for r := range h {
		wo[r*in], wo[r*in+1] = 0, 0
	}
	wo[p.endDim()*in+0] = float32(-k0)
	wo[p.endDim()*in+1] = float32(k1)
	head[tk.EOS*h+p.endDim()] = float32(gamma)
	for _, id := range tk.EOSIDs {
		if id != tk.EOS && id >= 0 && id < p.Vocab {
			head[id*h+p.biasDim()] = 0
		}
	}
	return nil
}
