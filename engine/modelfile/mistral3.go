package modelfile

import (
	"encoding/json"
	"fmt"
)

// mistral3TextPrefix is where mlx-lm keeps Mistral 3's text model in the
// files it writes (mistral3.py's Model.language_model).
const mistral3TextPrefix = "language_model."

// textConfig returns the text_config of a Mistral 3 config
// (Mistral3ForConditionalGeneration, model_type mistral3), and false for
// any other config.
func textConfig(data []byte) (json.RawMessage, bool, error) {
	var head struct {
		ModelType     string          `json:"model_type"`
		Architectures []string        `json:"architectures"`
		TextConfig    json.RawMessage `json:"text_config"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	is := head.ModelType == ArchMistral3
	for _, a := range head.Architectures {
		is = is || a == "Mistral3ForConditionalGeneration"
	}
	if !is {
		return nil, false, nil
	}
	if isNull(head.TextConfig) {
		return nil, false, fmt.Errorf("%w: mistral3 without a text_config", ErrInvalidConfig)
	}
	return head.TextConfig, true, nil
}

// parseMistral3 reads a Mistral 3 config as mlx-lm's mistral3.py does:
// the text model is text_config, run as llama unless its model_type is
// ministral3 or mistral4 (not supported here); tie_word_embeddings
// defaults to false; the quantization block and the dtype are the
// top level's. The weights are the text model's under "language_model."
// (the vision tower and projector, if present, are ignored).
func parseMistral3(data []byte, text json.RawMessage) (*Config, error) {
	var top map[string]json.RawMessage
	var tc map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if err := json.Unmarshal(text, &tc); err != nil || tc == nil {
		return nil, fmt.Errorf("%w: mistral3: text_config is not an object", ErrInvalidConfig)
	}
	var mt string
	if raw, ok := tc["model_type"]; ok {
		if err := json.Unmarshal(raw, &mt); err != nil {
			return nil, fmt.Errorf("%w: mistral3: text_config.model_type: %v", ErrInvalidConfig, err)
		}
	}
	switch mt {
	case "ministral3", "mistral4":
		return nil, fmt.Errorf("%w: mistral3 with a %s text model", ErrUnsupported, mt)
	}
	tc["model_type"] = json.RawMessage(`"` + ArchMistral + `"`)
	delete(tc, "architectures")
	if _, ok := tc["tie_word_embeddings"]; !ok {
		tc["tie_word_embeddings"] = json.RawMessage("false")
	}
	for _, k := range []string{"quantization", "quantization_config", "torch_dtype", "dtype"} {
		if v, ok := top[k]; ok {
			if _, set := tc[k]; !set || k == "quantization" || k == "quantization_config" {
				tc[k] = v
			}
		}
	}
	merged, err := json.Marshal(tc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	c, err := ParseConfig(merged)
	if err != nil {
		return nil, fmt.Errorf("mistral3 text_config: %w", err)
	}
	var archs []string
	if raw, ok := top["architectures"]; ok {
		_ = json.Unmarshal(raw, &archs) // checked by textConfig
	}
	c.Architecture, c.Architectures, c.ModelType, c.WeightPrefix = ArchMistral3, archs, ArchMistral3, mistral3TextPrefix
	return c, nil
}
