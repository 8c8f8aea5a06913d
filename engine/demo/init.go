package demo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"fusion/engine/modelfile"
)

// The weights are drawn so that a demo model behaves like a small language
// model, not like a fixed point: its next-token distribution has a few
// likely tokens and a long tail, changes with the context and from step to
// step, and greedy decoding walks through many different tokens.
//
// The residual stream has two parts. The first Hidden-reservedDims
// dimensions carry a random network in the spirit of Hugging Face's
// initialisation (initializer_range 0.02, norms at 1):
//
//   - embedding (and untied lm_head) rows are N(0, 0.02²), each rescaled to
//     the same norm, so no token is favoured by its length;
//   - input projections (q, k, v, gate, up) are N(0, 1/in), so attention
//     scores and MLP activations have unit spread and depend on the
//     content;
//   - output projections (o, down) are scaled so that each attention and
//     MLP output is ρ times the embedding, ρ growing with sqrt(hidden):
//     with tied embeddings the current token's own row would otherwise
//     dominate the final state and win every step (the old "\n\n\n…");
//   - the final norm sets the temperature: logits have a standard
//     deviation of sqrt(2·ln vocab), so the top token of a step typically
//     holds a few tens of percent, not all, of the probability.
//
// The last reservedDims dimensions are channels no random weight reads or
// writes (their columns in input projections and rows in output
// projections are zero):
//
//   - biasDim holds a small constant on every token's embedding row, and
//     the final norm weighs that dimension so that it adds ~40 nats to the
//     logit of every such row; rows without it (padding past the
//     tokenizer, suppressed tokens such as the end tokens unless the model
//     ends its answers with StopAfter) stay that far below. A suppressed
//     token fed back as input (a forced </think>) leaves the channel at 0
//     for that step: everything scores as usual there, nothing inverts;
//   - markerDim is set on the special tokens that open a turn
//     (<|im_start|>, ...), and endDim carries the end-of-answer signal;
//     both are only used with StopAfter (see stop.go).
const (
	initializerRange = 0.02
	reservedDims     = 3
	// suppressNats is how far below the other tokens padding rows and
	// suppressed tokens score.
	suppressNats = 40
)

// Reserved residual channels, counted from the last dimension.
func (p Params) biasDim() int   { return p.Hidden - 1 }
func (p Params) markerDim() int { return p.Hidden - 2 }
func (p Params) endDim() int    { return p.Hidden - 3 }

// scales are the magnitudes the weights are built from.
type scales struct {
	content int     // dimensions of the random network
	rho     float64 // each layer output's size relative to the embedding
	logit   float64 // target standard deviation of the logits
	norm    float64 // final norm weight
	alpha   float64 // the bias channel's value on a token's embedding
	bias    float64 // the final norm weight of the bias channel
	resid   float64 // estimated RMS of the final residual stream
}

func (p Params) scales() scales {
	s := scales{content: p.Hidden - reservedDims}
	h := float64(p.Hidden)
	s.rho = math.Sqrt(max(1, (h/0.25-1)/float64(2*max(p.Layers, 1))))
	s.logit = math.Sqrt(2 * math.Log(float64(p.Vocab)))
	s.norm = s.logit / (initializerRange * math.Sqrt(h))
	embNorm := initializerRange * math.Sqrt(float64(s.content))
	// Above every content value (5 standard deviations), the bias is the
	// edge of its quantization group, which quantizers keep (nearly)
	// exact: the final norm multiplies its error into every logit.
	s.alpha = max(embNorm/4, 5*initializerRange)
	s.resid = math.Sqrt((embNorm*embNorm*(1+2*float64(p.Layers)*s.rho*s.rho) + s.alpha*s.alpha) / h)
	s.bias = suppressNats * s.resid / (s.alpha * s.alpha)
	return s
}

// initWeights draws the weights (see the comment above); the same options
// and seed always give the same values.
func (m *Model) initWeights() error {
	p := m.Params
	sc := p.scales()
	rng := rand.New(rand.NewPCG(m.Options.Seed, 0x9e3779b97f4a7c15))
	hc := sc.content
	add := func(name string, data []float32, shape ...int) []float32 {
		s := make([]int64, len(shape))
		for i, d := range shape {
			s[i] = int64(d)
		}
		m.Tensors = append(m.Tensors, Tensor{Name: name, Shape: s, Data: data})
		return data
	}
	fill := func(n int, v float32) []float32 {
		d := make([]float32, n)
		for i := range d {
			d[i] = v
		}
		return d
	}
	// inputs: n stacked [out, Hidden] matrices, random over the content
	// columns, N(0, gain²/in).
	inputs := func(n, out int, gain float64) []float32 {
		d := make([]float32, n*out*p.Hidden)
		std := gain / math.Sqrt(float64(hc))
		for r := range n * out {
			for c := range hc {
				d[r*p.Hidden+c] = float32(rng.NormFloat64() * std)
			}
		}
		return d
	}
	input := func(name string, out int, gain float64) []float32 {
		return add(name, inputs(1, out, gain), out, p.Hidden)
	}
	// outputs: n stacked [Hidden, in] matrices, random over the content
	// rows.
	outputs := func(n, in int, std float64) []float32 {
		d := make([]float32, n*p.Hidden*in)
		for e := range n {
			for i := range hc * in {
				d[e*p.Hidden*in+i] = float32(rng.NormFloat64() * std)
			}
		}
		return d
	}
	output := func(name string, in int, std float64) []float32 {
		return add(name, outputs(1, in, std), p.Hidden, in)
	}
	// rows: [Vocab, Hidden] embedding-like rows for the tokenizer's ids,
	// content of norm 0.02·sqrt(content), the bias channel at alpha;
	// padding rows are zero.
	rows := func(name string) []float32 {
		d := make([]float32, p.Vocab*p.Hidden)
		norm := initializerRange * math.Sqrt(float64(hc))
		for t := range len(m.Tokenizer.Tokens) {
			row := d[t*p.Hidden : (t+1)*p.Hidden]
			var ss float64
			for c := range hc {
				v := rng.NormFloat64()
				row[c] = float32(v)
				ss += v * v
			}
			f := norm / math.Sqrt(ss)
			for c := range hc {
				row[c] *= float32(f)
			}
			row[p.biasDim()] = float32(sc.alpha)
		}
		return add(name, d, p.Vocab, p.Hidden)
	}

	emb := rows("model.embed_tokens.weight")
	// Queries and keys (or Qwen3's q/k norms) at qkGain make attention
	// scores spread by qkGain², so a head picks a few positions instead of
	// averaging the whole context away.
	qkGain := math.Sqrt(2)
	q, kv := p.Heads*p.HeadDim, p.KVHeads*p.HeadDim
	// Attention mixes unit-variance values (RMS ~0.7 after mixing), the
	// MLP's silu(gate)·up has an RMS of ~0.6.
	oStd := sc.rho * initializerRange / (0.7 * math.Sqrt(float64(q)))
	downStd := sc.rho * initializerRange / (0.6 * math.Sqrt(float64(p.Intermediate)))
	if p.Arch == modelfile.ArchGemma3Text {
		m.gemmaLayers(sc, input, output, add, fill)
	} else if p.Arch == modelfile.ArchGemma4Text {
		m.gemma4Layers(sc, rng, inputs, outputs, add, fill)
	} else if p.Arch == modelfile.ArchGptOss {
		m.gptOssLayers(sc, rng, inputs, outputs, add, fill)
	} else if p.Arch == modelfile.ArchDeepseekV3 {
		m.deepseekLayers(sc, rng, inputs, outputs, add, fill)
	} else if p.Arch == modelfile.ArchGlm4MoE {
		m.glmLayers(sc, rng, inputs, outputs, add, fill)
	} else if hybrid(p.Arch) {
		m.qwen3NextLayers(sc, rng, inputs, outputs, add, fill)
	} else {
		for l := range p.Layers {
			pre := fmt.Sprintf("model.layers.%d.", l)
			if n := m.Options.DistinctLayers; n > 0 && l >= n {
				m.repeatLayer(l%n, l)
				continue
			}
			add(pre+"input_layernorm.weight", fill(p.Hidden, 1), p.Hidden)
			input(pre+"self_attn.q_proj.weight", q, qkGain)
			input(pre+"self_attn.k_proj.weight", kv, qkGain)
			input(pre+"self_attn.v_proj.weight", kv, 1)
			output(pre+"self_attn.o_proj.weight", q, oStd)
			if p.qkNorm() {
				add(pre+"self_attn.q_norm.weight", fill(p.HeadDim, float32(qkGain)), p.HeadDim)
				add(pre+"self_attn.k_norm.weight", fill(p.HeadDim, float32(qkGain)), p.HeadDim)
			}
			add(pre+"post_attention_layernorm.weight", fill(p.Hidden, 1), p.Hidden)
			if p.sparse(l) {
				// The router at unit gain spreads its logits by ~1, so a
				// token's experts change with its context; each expert is
				// an MLP of the same scale, and their mix (weights summing
				// to ~1) stays that size.
				e, in := p.Experts, p.MoEIntermediate
				input(pre+"mlp.gate.weight", e, 1)
				add(pre+"mlp.switch_mlp.gate_proj.weight", inputs(e, in, 1), e, in, p.Hidden)
				add(pre+"mlp.switch_mlp.up_proj.weight", inputs(e, in, 1), e, in, p.Hidden)
				std := sc.rho * initializerRange / (0.6 * math.Sqrt(float64(in)))
				add(pre+"mlp.switch_mlp.down_proj.weight", outputs(e, in, std), e, p.Hidden, in)
				continue
			}
			input(pre+"mlp.gate_proj.weight", p.Intermediate, 1)
			input(pre+"mlp.up_proj.weight", p.Intermediate, 1)
			output(pre+"mlp.down_proj.weight", p.Intermediate, downStd)
		}
	}
	final := add("model.norm.weight", fill(p.Hidden, float32(sc.norm)), p.Hidden)
	final[p.biasDim()] = float32(sc.bias)
	if p.Arch == modelfile.ArchGemma3Text {
		gemmaNormOffset(final)
	}
	head := emb
	if !p.TieEmbeddings {
		head = rows("lm_head.weight")
	}
	var err error
	if m.Options.StopAfter > 0 {
		err = m.addClock(emb, head, sc)
	} else {
		// Without an end-of-answer signal, end tokens score like padding:
		// answers run to max_tokens, as tests that count tokens expect.
		for _, id := range m.Tokenizer.EOSIDs {
			if id >= 0 && id < p.Vocab {
				head[id*p.Hidden+p.biasDim()] = 0
			}
		}
	}
	if err != nil {
		return err
	}
	if p.Multimodal {
		m.multimodalTensors(add)
	}
	if p.Arch == modelfile.ArchMistral3 || p.Arch == modelfile.ArchMinistral3 {
		m.visionTensors(add)
	}
	round := m.roundFunc()
	rounded := map[*float32]bool{} // a repeated layer shares its values
	for _, t := range m.Tensors {
		if len(t.Data) == 0 || rounded[&t.Data[0]] {
			continue
		}
		rounded[&t.Data[0]] = true
		for i, v := range t.Data {
			t.Data[i] = round(v)
		}
	}
	return nil
}

// repeatLayer appends layer dst's tensors as views of layer src's values
// (Options.DistinctLayers).
func (m *Model) repeatLayer(src, dst int) {
	from, to := fmt.Sprintf("model.layers.%d.", src), fmt.Sprintf("model.layers.%d.", dst)
	for _, t := range m.Tensors {
		if rest, ok := strings.CutPrefix(t.Name, from); ok {
			t.Name = to + rest
			m.Tensors = append(m.Tensors, t)
		}
	}
}

// tensor returns the in-memory tensor of that name.
func (m *Model) tensor(name string) *Tensor {
	i := slices.IndexFunc(m.Tensors, func(t Tensor) bool { return t.Name == name })
	if i < 0 {
		return nil
	}
	return &m.Tensors[i]
}

// Suppress makes the model never choose these tokens: their output rows
// lose the bias channel and score like padding, ~40 nats below the rest (a
// thinking model that cannot close its <think> block, for tests of what
// closes it instead). A tied model is untied first (lm_head.weight, a copy
// of the embedding): the tokens' input rows keep their bias channel, so
// when a suppressed token is fed in anyway (a reasoning budget forcing
// </think>), the next step's end tokens and padding still score ~40 nats
// below the rest. (Tied, the bias channel vanished at that position and
// every row scored alike: an end token right after a forced </think>, a
// 1-in-hundreds event that made thinking tests flaky.)
func (m *Model) Suppress(tokens ...string) error {
	if m.Params.TieEmbeddings {
		emb := m.tensor("model.embed_tokens.weight")
		head := *emb
		head.Name = "lm_head.weight"
		head.Data = slices.Clone(emb.Data)
		m.Tensors = append(m.Tensors, head)
		m.Params.TieEmbeddings = false
		m.Options.Untied = true
		m.Config["tie_word_embeddings"] = false
	}
	p := m.Params
	head := m.tensor("lm_head.weight")
	for _, s := range tokens {
		id := slices.Index(m.Tokenizer.Tokens, s)
		if id < 0 {
			return fmt.Errorf("demo: no token %q to suppress", s)
		}
		head.Data[id*p.Hidden+p.biasDim()] = 0
	}
	return nil
}
