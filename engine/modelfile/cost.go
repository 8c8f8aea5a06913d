package modelfile

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
