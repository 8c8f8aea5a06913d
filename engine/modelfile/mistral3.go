package modelfile

import (
	"encoding/json"
	"fmt"
	"math"
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
// ministral3 (Ministral 3, ArchMinistral3) or mistral4 (not supported
// here); tie_word_embeddings
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
	textArch := ArchMistral
	switch mt {
	case ArchMinistral3:
		textArch = ArchMinistral3
	case "mistral4":
		return nil, fmt.Errorf("%w: mistral3 with a %s text model", ErrUnsupported, mt)
	}
	tc["model_type"] = json.RawMessage(`"` + textArch + `"`)
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
	if c.Architecture != ArchMinistral3 {
		c.Architecture = ArchMistral3
	}
	c.Architectures, c.ModelType, c.WeightPrefix = archs, ArchMistral3, mistral3TextPrefix
	return c, nil
}

// QueryScale is Ministral 3's query scale (mlx-lm's
// _get_llama_4_attn_scale, Llama 4's attention temperature): the queries
// at position p, once rotated, are multiplied by
// 1 + Beta·ln(1 + ⌊p / Every⌋), so 1 for the first Every positions.
type QueryScale struct {
	Beta  float64 `json:"beta"`  // rope_parameters.llama_4_scaling_beta
	Every int     `json:"every"` // rope_parameters.original_max_position_embeddings
}

// At is the factor at position p ≥ 0, in float32 as mlx-lm computes it
// (⌊p / Every⌋ by integer division: mlx's float32 quotient would round
// up to the next integer only past 2^24 positions).
func (q *QueryScale) At(p int) float32 {
	n := float32(p / q.Every)
	return 1 + float32(q.Beta)*float32(math.Log(float64(1+n)))
}

// ministral3 reads what mlx-lm's ministral3.py takes from
// rope_parameters, which it requires (there is no top-level rope_theta):
// rope_theta and the RoPE scaling (yarn in Ministral 3's checkpoints),
// and the query scale's llama_4_scaling_beta and
// original_max_position_embeddings.
func (c *Config) ministral3(r *rawConfig) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: ministral3: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if isNull(r.RopeParameters) {
		return bad("no rope_parameters")
	}
	var p struct {
		Theta *float64 `json:"rope_theta"`
		Beta  *float64 `json:"llama_4_scaling_beta"`
		Orig  *int64   `json:"original_max_position_embeddings"`
	}
	if err := json.Unmarshal(r.RopeParameters, &p); err != nil {
		return bad("rope_parameters: %v", err)
	}
	switch {
	case p.Theta == nil || p.Beta == nil || p.Orig == nil:
		return bad("rope_parameters needs rope_theta, llama_4_scaling_beta and original_max_position_embeddings")
	case !positive(*p.Theta):
		return bad("rope_theta %v is not positive", *p.Theta)
	case !finite(*p.Beta) || *p.Beta < 0 || *p.Beta > maxQueryScaleBeta:
		return bad("llama_4_scaling_beta %v out of range [0, %v]", *p.Beta, maxQueryScaleBeta)
	case *p.Orig <= 0 || *p.Orig > maxPositions:
		return bad("original_max_position_embeddings %d out of range [1, %d]", *p.Orig, maxPositions)
	}
	scaling, _, err := parseRope("rope_parameters", r.RopeParameters)
	if err != nil {
		return err
	}
	c.RopeScaling, c.RopeTheta = scaling, *p.Theta
	c.QueryScale = &QueryScale{Beta: *p.Beta, Every: int(*p.Orig)}
	return nil
}

// maxQueryScaleBeta bounds llama_4_scaling_beta (Ministral 3: 0.1): past
// it the queries' scale would be absurd.
const maxQueryScaleBeta = 1000
