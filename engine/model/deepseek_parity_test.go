package model

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"

	"fusion/engine/demo"
	"fusion/engine/modelfile"
	"fusion/engine/safetensors"
	"fusion/engine/tensor"
)

// deepseekCases, run by TestParityMLXFamilies (one mlx-lm process for
// all families), are DeepSeek-V3 demos: 4 heads of latent attention (q
// LoRA 64, latent 64, 32 rotated features, nope and v 64, yarn ×40 with
// mscale_all_dim), a dense first layer, then 8 sigmoid-routed experts of
// 64 in 4 groups of which 2 are kept, 2 experts per token, one shared
// expert, routed_scaling_factor 2.5.
func deepseekCases() []parityCase {
	ds := demo.Options{Arch: "deepseek_v3", Layers: 3, Hidden: 128, Heads: 4, HeadDim: 64, Intermediate: 256,
		Experts: 8, ExpertsPerTok: 2, MoEIntermediate: 64, Seed: 22}
	q4 := ds
	q4.Quantize, q4.GroupSize = 4, 64
	// GLM-4.5: GQA 4/2 with q/k/v biases, RoPE on 32 of 64 features, the
	// same router (one group), a dense first layer.
	glm := demo.Options{Arch: "glm4_moe", Layers: 3, Hidden: 128, Heads: 4, KVHeads: 2, HeadDim: 64, Intermediate: 256,
		Experts: 8, ExpertsPerTok: 2, MoEIntermediate: 64, Seed: 23}
	glm4 := glm
	glm4.Quantize, glm4.GroupSize = 4, 64
	return []parityCase{
		{name: "deepseek_v3-bf16", opts: ds, tol: 1e-3},
		// Everything quantized but the routers (MoEGate is no Linear),
		// embed_q and unembed_out as stacked 4-bit MultiLinears.
		{name: "deepseek_v3-mlx4", opts: q4, tol: 1e-2},
		// The older layout with a 4-bit kv_b_proj, which both sides
		// dequantize, split and quantize again on load (bf16: the split
		// alone, TestDeepseekKVBProj).
		{name: "deepseek_v3-mlx4-kv_b_proj", opts: q4, tol: 1e-2, setup: toKVBProj},
		{name: "glm4_moe-bf16", opts: glm, tol: 1e-3},
		{name: "glm4_moe-mlx4", opts: glm4, tol: 1e-2},
	}
}

// toKVBProj rewrites a deepseek_v3 demo in the older layout: each layer's
// embed_q and unembed_out joined back into kv_b_proj [heads·(nope+v),
// lora] (head h: embed_q[h] transposed, then unembed_out[h]), in bf16,
// or quantized as the model is (4-bit affine, the config's group), the
// layout of Hugging Face checkpoints and of mlx-community conversions
// made before mlx-lm split it on load.
func toKVBProj(dir string) error {
	mf, err := modelfile.Open(dir, modelfile.Options{LoadMode: safetensors.LoadRead})
	if err != nil {
		return err
	}
	defer mf.Close()
	c := mf.Config
	m, heads := c.MLA, c.NumAttentionHeads
	var out []tensor.Tensor
	for l := range c.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.self_attn.", l)
		eq, err := mf.Experts(p + "embed_q")
		if err != nil {
			return err
		}
		uo, err := mf.Experts(p + "unembed_out")
		if err != nil {
			return err
		}
		rows := heads * (m.NopeDim + m.VDim)
		kvb := make([]float32, 0, rows*m.KVLoraRank)
		for h := range heads {
			wk, err := eq[h].Dequantize() // [lora, nope]
			if err != nil {
				return err
			}
			for r := range m.NopeDim {
				for c := range m.KVLoraRank {
					kvb = append(kvb, wk[c*m.NopeDim+r])
				}
			}
			wv, err := uo[h].Dequantize()
			if err != nil {
				return err
			}
			kvb = append(kvb, wv...)
		}
		name := p + "kv_b_proj"
		if q := c.Quantization; q != nil {
			packed, scales, biases, err := modelfile.QuantizeAffine(kvb, rows, m.KVLoraRank, q.GroupSize, q.Bits)
			if err != nil {
				return err
			}
			words := make([]byte, 4*len(packed))
			for i, v := range packed {
				binary.LittleEndian.PutUint32(words[4*i:], v)
			}
			groups := []int64{int64(rows), int64(m.KVLoraRank / q.GroupSize)}
			out = append(out,
				tensor.Tensor{Name: name + ".weight", DType: tensor.U32, Shape: []int64{int64(rows), int64(len(packed) / rows)}, Data: words},
				tensor.Tensor{Name: name + ".scales", DType: tensor.BF16, Shape: groups, Data: bf16Bytes(scales)},
				tensor.Tensor{Name: name + ".biases", DType: tensor.BF16, Shape: groups, Data: bf16Bytes(biases)})
			continue
		}
		out = append(out, tensor.Tensor{Name: name + ".weight", DType: tensor.BF16, Shape: []int64{int64(rows), int64(m.KVLoraRank)}, Data: bf16Bytes(kvb)})
	}
	for _, name := range mf.Weights.Names() {
		if strings.Contains(name, ".embed_q.") || strings.Contains(name, ".unembed_out.") {
			continue
		}
		t, _ := mf.Weights.Tensor(name)
		out = append(out, tensor.Tensor{Name: t.Name, DType: t.DType, Shape: t.Shape, Data: bytes.Clone(t.Data)})
	}
	safetensors.SortLikePython(out)
	return safetensors.WriteFile(filepath.Join(dir, modelfile.SingleWeightsFile), out, map[string]string{"format": "mlx"})
}
