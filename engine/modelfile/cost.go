package modelfile

import (
	"strconv"
	"strings"
)

// HeadLayers is the output head's cost per token counted in layers: the
// weights a token reads in the head (vocab × hidden) over those it reads
// in an average layer (attention's four projections and the MLP, or the
// experts a token is routed to in a mixture's sparse layers). Decode is
// bound by reading weights, so this is what the last stage of a pipeline
// runs beyond its layers. 0 when the configuration does not give the
// sizes.
func (c *Config) HeadLayers() float64 {
	h := int64(c.HiddenSize)
	if h <= 0 || c.VocabSize <= 0 || c.NumHiddenLayers <= 0 {
		return 0
	}
	q, kv := int64(c.NumAttentionHeads*c.HeadDim), int64(c.NumKeyValueHeads*c.HeadDim)
	attn := 2*h*q + 2*h*kv
	var total int64
	for l := range c.NumHiddenLayers {
		mlp := 3 * h * int64(c.IntermediateSize)
		if c.MoE.Sparse(l) {
			mlp = 3 * h * int64(c.MoE.Intermediate) * int64(max(c.MoE.TopK, 1))
		}
		total += attn + mlp
	}
	if total <= 0 {
		return 0
	}
	return float64(int64(c.VocabSize)*h) / (float64(total) / float64(c.NumHiddenLayers))
}

// Footprint is what each part of a model holds in memory and reads per
// token, from the tensor table of its weight files (no weight read): what
// the stages of a pipeline are sized and balanced by. A stage holds its
// layers' tensors; the first stage also the token embeddings, the last
// the final norm and the output head. Memory and compute differ for a
// mixture: a layer holds all its experts, but a token reads only those it
// is routed to.
type Footprint struct {
	// Bytes is, per decoder layer, what its tensors hold; Read what one
	// token reads of them: all of a dense layer's, and of a mixture's
	// stacked experts the share TopK/Experts (the router and shared
	// experts are read whole).
	Bytes, Read []int64
	// First is what the first stage holds beyond its layers: the token
	// embeddings and the tensors outside every layer that are neither the
	// final norm nor the head (Gemma 4's per-layer embeddings, a GGUF's
	// rope_freqs). Last is what the last stage holds beyond its layers:
	// the final norm and the head, which is the embeddings again when
	// they are tied (another node holds its own copy).
	First, Last int64
	// HeadRead is the bytes the output head reads per token (its whole
	// matrix: decode computes every logit).
	HeadRead int64
}

// Footprint files a model's tensors, given by name and bytes in either
// spelling (Hugging Face/mlx-lm: model.layers.N.…, embed_tokens, lm_head,
// switch_mlp or experts; GGUF: blk.N.…, token_embd, output,
// ffn_*_exps), into c's layers and the edges of a pipeline. Tensors the
// text model does not load are left out: vision and audio towers, and
// layers past NumHiddenLayers (DeepSeek-V3's multi-token prediction
// layer). A model with no head tensor has its head tied to the
// embeddings.
func (c *Config) Footprint(tensors map[string]int64) Footprint {
	f := Footprint{Bytes: make([]int64, c.NumHiddenLayers), Read: make([]int64, c.NumHiddenLayers)}
	var embed, head int64
	for name, n := range tensors {
		if unloaded(name) {
			continue
		}
		if l, ok := layerOf(name); ok {
			if l >= c.NumHiddenLayers {
				continue
			}
			f.Bytes[l] += n
			f.Read[l] += c.readShare(name, n)
			continue
		}
		switch {
		case strings.Contains(name, "embed_tokens.") || strings.HasPrefix(name, "token_embd."):
			embed += n
		case strings.Contains(name, "per_layer"): // Gemma 4's per-layer embeddings, their projection and norm
			f.First += n
		case strings.HasPrefix(name, "lm_head.") || strings.Contains(name, ".lm_head.") || strings.HasPrefix(name, "output."): // language_model.lm_head. in vision-language wrappers
			head += n
		case strings.HasSuffix(name, "norm.weight"):
			f.Last += n
		default:
			f.First += n
		}
	}
	f.First += embed
	if head == 0 {
		head = embed // tied
	}
	f.Last += head
	f.HeadRead = head
	return f
}

// Compute is the footprint's cost per token of each layer and of the head
// in the units HeadLayers counts: the bytes they read over those the mean
// layer reads (nil, 0 when nothing is read).
func (f Footprint) Compute() (layers []float64, head float64) {
	var total int64
	for _, r := range f.Read {
		total += r
	}
	if total <= 0 || len(f.Read) == 0 {
		return nil, 0
	}
	mean := float64(total) / float64(len(f.Read))
	layers = make([]float64, len(f.Read))
	for l, r := range f.Read {
		layers[l] = float64(r) / mean
	}
	return layers, float64(f.HeadRead) / mean
}

// readShare is what a token reads of a layer tensor of n bytes: the
// share TopK/Experts of a mixture's stacked (or per-expert) experts, the
// whole of anything else.
func (c *Config) readShare(name string, n int64) int64 {
	expert := strings.Contains(name, ".switch_mlp.") || strings.Contains(name, ".experts.") || strings.Contains(name, "_exps.")
	if !expert || c.MoE == nil || c.MoE.Experts <= 0 {
		return n
	}
	return n * int64(min(max(c.MoE.TopK, 1), c.MoE.Experts)) / int64(c.MoE.Experts)
}

// layerOf is the decoder layer a tensor name is in: "layers.N." or
// GGUF's "blk.N.", at the start of the name or after a dot.
func layerOf(name string) (int, bool) {
	for _, p := range []string{"layers.", "blk."} {
		for i := 0; ; {
			j := strings.Index(name[i:], p)
			if j < 0 {
				break
			}
			j += i
			i = j + len(p)
			if j > 0 && name[j-1] != '.' {
				continue
			}
			k := i
			for k < len(name) && name[k] >= '0' && name[k] <= '9' {
				k++
			}
			if k == i || k == len(name) || name[k] != '.' {
				continue
			}
			l, err := strconv.Atoi(name[i:k])
			if err != nil {
				continue
			}
			return l, true
		}
	}
	return 0, false
}

// unloaded reports whether a tensor belongs to a part of a checkpoint the
// text model never loads (a vision or audio tower and its projector).
func unloaded(name string) bool {
	for _, s := range []string{"vision", "visual", "audio", "multi_modal_projector", "embed_vision", "embed_audio"} {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}
