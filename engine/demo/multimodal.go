package demo

import (
	"fmt"
	"strings"

	"fusion/engine/modelfile"
)

// Gemma 3 and Gemma 4 as most mlx-community conversions ship them
// (--multimodal): the vision-language checkpoint, config.json's
// model_type gemma3 or gemma4 with the text model's config as
// text_config (quantization, dtype and vocab_size at the top level, as
// mlx-lm's gemma3.py and gemma4.py read them), the text weights under
// "language_model." and a tiny random vision tower beside them, which
// neither mlx-lm nor fusion loads.

// multimodalArch is the vision-language wrapper of a text architecture:
// its model_type and transformers class ("" if it has none here).
func multimodalArch(arch string) (modelType, class string) {
	switch arch {
	case modelfile.ArchGemma3Text:
		return "gemma3", "Gemma3ForConditionalGeneration"
	case modelfile.ArchGemma4Text:
		return "gemma4", "Gemma4ForConditionalGeneration"
	}
	return "", ""
}

// multimodalConfig wraps the text model's config.json c.
func (m *Model) multimodalConfig(c map[string]any) map[string]any {
	p := m.Params
	mt, class := multimodalArch(p.Arch)
	top := map[string]any{
		"architectures":        []string{class},
		"model_type":           mt,
		"initializer_range":    0.02,
		"mm_tokens_per_image":  4,
		"torch_dtype":          c["torch_dtype"],
		"transformers_version": c["transformers_version"],
		// mlx-lm gives the text model the top level's vocab_size (default
		// 262208 or 262144, the real vocabularies), whatever text_config
		// says.
		"vocab_size": p.Vocab,
		"vision_config": map[string]any{
			"model_type": mt + "_vision", "hidden_size": visionHidden, "intermediate_size": visionHidden,
			"num_attention_heads": 1, "num_hidden_layers": 0, "image_size": 16, "patch_size": visionPatch, "num_channels": 3,
		},
	}
	if p.Arch == modelfile.ArchGemma3Text {
		top["vision_config"].(map[string]any)["model_type"] = "siglip_vision_model"
	}
	return wrapText(top, c)
}

// wrapText makes text the text_config of a vision-language config top,
// as transformers writes them: the quantization blocks (mlx-lm's) and
// the dtype at the top level only, no architectures inside. It returns
// top.
func wrapText(top, text map[string]any) map[string]any {
	for _, k := range []string{"quantization", "quantization_config"} {
		if q, ok := text[k]; ok {
			top[k] = q
			delete(text, k)
		}
	}
	delete(text, "architectures")
	delete(text, "torch_dtype")
	top["text_config"] = text
	return top
}

// multimodalTensors adds the vision tower: a patch embedding, a norm and
// the projector into the text model's width, named as the checkpoints
// name them (one of them a "_proj.weight" a careless loader could take
// for a text layer's).
func (m *Model) multimodalTensors(add func(name string, data []float32, shape ...int) []float32) {
	p := m.Params
	ramp := func(n int) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(i%7) / 64
		}
		return out
	}
	add("vision_tower.vision_model.embeddings.patch_embedding.weight", ramp(visionHidden*visionPatch*visionPatch*3), visionHidden, visionPatch, visionPatch, 3)
	add("vision_tower.vision_model.encoder.layers.0.self_attn.q_proj.weight", ramp(visionHidden*visionHidden), visionHidden, visionHidden)
	add("vision_tower.vision_model.post_layernorm.weight", ramp(visionHidden), visionHidden)
	if p.Arch == modelfile.ArchGemma3Text {
		add("multi_modal_projector.mm_input_projection_weight", ramp(visionHidden*p.Hidden), visionHidden, p.Hidden)
		add("multi_modal_projector.mm_soft_emb_norm.weight", ramp(visionHidden), visionHidden)
		return
	}
	add("embed_vision.embedding_projection.weight", ramp(p.Hidden*visionHidden), p.Hidden, visionHidden)
}

// isVisionTensor says whether a tensor is the vision tower's (written
// under its own name, not the text model's "language_model.").
func isVisionTensor(name string) bool {
	for _, prefix := range []string{"vision_tower.", "multi_modal_projector.", "embed_vision."} {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// resolveMultimodal checks --multimodal is for a family that has the
// wrapper.
func (o *Options) resolveMultimodal() error {
	if mt, _ := multimodalArch(o.Arch); o.Multimodal && mt == "" {
		return fmt.Errorf("demo: --multimodal is for gemma3_text and gemma4_text, not %s", o.Arch)
	}
	return nil
}
