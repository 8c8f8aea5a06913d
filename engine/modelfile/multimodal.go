package modelfile

import (
	"encoding/json"
	"fmt"
	"slices"
)

// gemmaMultimodal is how mlx-lm 0.32.2 reads a vision-language Gemma
// config (models/gemma3.py, gemma4.py: Gemma 3 4B and up, Gemma 4, as
// most mlx-community conversions ship them): the text model is
// text_config, its weights are under "language_model." beside a vision
// tower (and, for Gemma 4, audio) that mlx-lm drops and we never load.
type gemmaMultimodal struct {
	modelType, class, text string
	// vocab is the top-level vocab_size's default: mlx-lm's wrapper sets
	// the text model's vocabulary to the top-level value (or this),
	// whatever text_config says.
	vocab int
	// defaults fill text_config keys it lacks: the wrapper's head counts
	// and the text model's dataclass defaults for the sizes our parser
	// requires (Gemma 3 4B's text_config, as Google ships it, names only
	// a few keys and leaves the rest to them), then what transformers'
	// text config defaults to where mlx-lm's differ only in what they
	// never use (max_position_embeddings).
	defaults map[string]any
}

var gemmaMultimodals = []gemmaMultimodal{
	{modelType: "gemma3", class: "Gemma3ForConditionalGeneration", text: ArchGemma3Text, vocab: 262208, defaults: map[string]any{
		"num_attention_heads": 8, "num_key_value_heads": 4,
		"hidden_size": 1152, "num_hidden_layers": 26, "intermediate_size": 6912, "rope_theta": 1e6,
		"max_position_embeddings": 131072,
	}},
	{modelType: "gemma4", class: "Gemma4ForConditionalGeneration", text: ArchGemma4Text, vocab: 262144, defaults: map[string]any{
		"num_attention_heads": 8, "num_key_value_heads": 1,
		"hidden_size": 1536, "num_hidden_layers": 35, "intermediate_size": 6144,
		"max_position_embeddings": 131072,
	}},
}

// gemmaTextPrefix is where mlx-lm keeps the text model's weights.
const gemmaTextPrefix = "language_model."

// gemmaMultimodalConfig returns the text model's config of a gemma3 or
// gemma4 vision-language config (model_type, or architectures naming
// Gemma3ForConditionalGeneration / Gemma4ForConditionalGeneration), run
// as gemma3_text or gemma4_text with mlx-lm's defaults, the top level's
// vocabulary size, quantization, dtype and special token ids, and the
// weights under "language_model."; false for any other config.
func gemmaMultimodalConfig(data []byte) (*Config, bool, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	var mt string
	var archs []string
	if raw, ok := top["model_type"]; ok {
		_ = json.Unmarshal(raw, &mt) // not a string: not ours
	}
	if raw, ok := top["architectures"]; ok {
		_ = json.Unmarshal(raw, &archs)
	}
	i := slices.IndexFunc(gemmaMultimodals, func(g gemmaMultimodal) bool {
		return mt == g.modelType || slices.Contains(archs, g.class)
	})
	if i < 0 {
		return nil, false, nil
	}
	g := gemmaMultimodals[i]
	raw, ok := top["text_config"]
	var tc map[string]json.RawMessage
	if !ok || isNull(raw) {
		return nil, true, fmt.Errorf("%w: %s without a text_config", ErrInvalidConfig, g.modelType)
	}
	if err := json.Unmarshal(raw, &tc); err != nil || tc == nil {
		return nil, true, fmt.Errorf("%w: %s: text_config is not an object", ErrInvalidConfig, g.modelType)
	}
	vocab := json.RawMessage(fmt.Sprint(g.vocab))
	if v, ok := top["vocab_size"]; ok && !isNull(v) {
		vocab = v
	}
	tc["vocab_size"] = vocab
	for k, v := range g.defaults {
		if _, set := tc[k]; !set {
			b, err := json.Marshal(v)
			if err != nil {
				return nil, true, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
			}
			tc[k] = b
		}
	}
	for _, k := range []string{"quantization", "quantization_config", "torch_dtype", "dtype", "bos_token_id", "eos_token_id"} {
		if v, ok := top[k]; ok {
			if _, set := tc[k]; !set || k == "quantization" || k == "quantization_config" {
				tc[k] = v
			}
		}
	}
	tc["model_type"] = json.RawMessage(`"` + g.text + `"`)
	delete(tc, "architectures")
	merged, err := json.Marshal(tc)
	if err != nil {
		return nil, true, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	c, err := parseFlat(merged)
	if err != nil {
		return nil, true, fmt.Errorf("%s text_config: %w", g.modelType, err)
	}
	c.Architectures, c.ModelType, c.WeightPrefix = archs, g.modelType, gemmaTextPrefix
	return c, true, nil
}
