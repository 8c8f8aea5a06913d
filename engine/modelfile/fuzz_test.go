package modelfile

import (
	"testing"
)

// FuzzConfigJSON feeds arbitrary bytes as config.json (and as
// generation_config.json). Parsing never panics, and an accepted config
// satisfies every invariant the engine sizes buffers from.
func FuzzConfigJSON(f *testing.F) {
	f.Add(cfgJSON(f, nil))
	f.Add(cfgJSON(f, obj{"architectures": []string{"LlamaForCausalLM"}, "head_dim": nil, "rope_scaling": obj{"factor": 32.0, "high_freq_factor": 4.0,
		"low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "eos_token_id": []int{1, 2}}))
	f.Add(cfgJSON(f, obj{"rope_scaling": obj{"type": "yarn", "factor": 4, "original_max_position_embeddings": 32768}}))
	f.Add(cfgJSON(f, obj{"quantization": obj{"group_size": 64, "bits": 4, "mode": "affine", "lm_head": false,
		"model.layers.0.mlp.down_proj": obj{"group_size": 32, "bits": 6}}, "quantization_config": obj{"group_size": 64, "bits": 4}}))
	f.Add(cfgJSON(f, obj{"architectures": []string{"Qwen2ForCausalLM"}, "rope_parameters": obj{"rope_type": "default", "rope_theta": 1e6}}))
	f.Add([]byte(`{"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643], "temperature": 0.6, "top_k": 20, "top_p": 0.95}`))
	f.Add([]byte(`{"hidden_size": 1e400}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if g, err := ParseGenerationConfig(data); err == nil && g.TopP != nil && (*g.TopP <= 0 || *g.TopP > 1) {
			t.Fatalf("accepted top_p %v", *g.TopP)
		}
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		switch {
		case c.Architecture != ArchLlama && c.Architecture != ArchQwen2 && c.Architecture != ArchQwen3:
			t.Fatalf("architecture %q", c.Architecture)
		case c.HiddenSize <= 0 || c.HiddenSize > maxHidden, c.IntermediateSize <= 0 || c.IntermediateSize > maxIntermediate,
			c.NumHiddenLayers <= 0 || c.NumHiddenLayers > maxLayers, c.VocabSize <= 0 || c.VocabSize > maxVocab,
			c.MaxPositionEmbeddings <= 0 || c.MaxPositionEmbeddings > maxPositions:
			t.Fatalf("size out of range: %+v", c)
		case c.NumAttentionHeads <= 0 || c.NumKeyValueHeads <= 0 || c.NumAttentionHeads%c.NumKeyValueHeads != 0:
			t.Fatalf("heads %d / kv heads %d", c.NumAttentionHeads, c.NumKeyValueHeads)
		case c.HeadDim <= 0 || c.HeadDim%2 != 0 || c.HeadDim > maxHeadDim:
			t.Fatalf("head_dim %d", c.HeadDim)
		case !positive(c.RMSNormEps) || !positive(c.RopeTheta):
			t.Fatalf("eps %v theta %v", c.RMSNormEps, c.RopeTheta)
		case c.RopeScaling != nil && !positive(c.RopeScaling.Factor):
			t.Fatalf("rope factor %v", c.RopeScaling.Factor)
		}
		for _, id := range append(append([]int(nil), c.BOSTokenIDs...), c.EOSTokenIDs...) {
			if id < 0 || id >= c.VocabSize {
				t.Fatalf("token id %d outside vocab %d", id, c.VocabSize)
			}
		}
		if q := c.Quantization; q != nil {
			if err := CheckAffine(q.GroupSize, q.Bits); err != nil || q.Mode != ModeAffine {
				t.Fatalf("quantization %+v: %v", q.QuantParams, err)
			}
			for p, o := range q.Overrides {
				if o != nil && (CheckAffine(o.GroupSize, o.Bits) != nil || o.Mode != ModeAffine) {
					t.Fatalf("override %s: %+v", p, *o)
				}
			}
		}
	})
}
