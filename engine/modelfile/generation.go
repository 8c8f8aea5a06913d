package modelfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// GenerationConfig is generation_config.json: the model's own sampling
// defaults and end-of-sequence ids. Absent fields are nil.
type GenerationConfig struct {
	BOSTokenIDs       TokenIDs `json:"bos_token_id,omitempty"`
	EOSTokenIDs       TokenIDs `json:"eos_token_id,omitempty"`
	PadTokenIDs       TokenIDs `json:"pad_token_id,omitempty"`
	DoSample          *bool    `json:"do_sample,omitempty"`
	Temperature       *float64 `json:"temperature,omitempty"`
	TopP              *float64 `json:"top_p,omitempty"`
	TopK              *int     `json:"top_k,omitempty"`
	MinP              *float64 `json:"min_p,omitempty"`
	RepetitionPenalty *float64 `json:"repetition_penalty,omitempty"`
	MaxNewTokens      *int     `json:"max_new_tokens,omitempty"`
	MaxLength         *int     `json:"max_length,omitempty"`
}

// ParseGenerationConfig parses and checks generation_config.json.
func ParseGenerationConfig(data []byte) (*GenerationConfig, error) {
	var g GenerationConfig
	if err := json.Unmarshal(data, &g); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	for _, ids := range []struct {
		name string
		v    TokenIDs
	}{{"bos_token_id", g.BOSTokenIDs}, {"eos_token_id", g.EOSTokenIDs}, {"pad_token_id", g.PadTokenIDs}} {
		if err := ids.v.check(ids.name, 0); err != nil {
			return nil, err
		}
	}
	bad := func(name string, v any) error { return fmt.Errorf("%w: %s %v out of range", ErrInvalidConfig, name, v) }
	switch {
	case g.Temperature != nil && (!finite(*g.Temperature) || *g.Temperature < 0):
		return nil, bad("temperature", *g.Temperature)
	case g.TopP != nil && !(*g.TopP > 0 && *g.TopP <= 1):
		return nil, bad("top_p", *g.TopP)
	case g.TopK != nil && *g.TopK < 0:
		return nil, bad("top_k", *g.TopK)
	case g.MinP != nil && !(*g.MinP >= 0 && *g.MinP <= 1):
		return nil, bad("min_p", *g.MinP)
	case g.RepetitionPenalty != nil && !positive(*g.RepetitionPenalty):
		return nil, bad("repetition_penalty", *g.RepetitionPenalty)
	case g.MaxNewTokens != nil && *g.MaxNewTokens < 0:
		return nil, bad("max_new_tokens", *g.MaxNewTokens)
	case g.MaxLength != nil && *g.MaxLength < 0:
		return nil, bad("max_length", *g.MaxLength)
	}
	return &g, nil
}

// LoadGenerationConfig reads dir/generation_config.json; it returns nil
// and no error when the file does not exist.
func LoadGenerationConfig(dir string) (*GenerationConfig, error) {
	path := filepath.Join(dir, GenerationConfigFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("modelfile: %w", err)
	}
	g, err := ParseGenerationConfig(data)
	if err != nil {
		return nil, fmt.Errorf("modelfile: %s: %w", path, err)
	}
	return g, nil
}
