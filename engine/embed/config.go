package embed

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"fusion/engine/model"
)

// Pooling is how a sentence embedding is made from the token states.
type Pooling string

// Poolings (sentence-transformers' pooling_mode_* flags).
const (
	PoolCLS       Pooling = "cls"        // the first token's state
	PoolMean      Pooling = "mean"       // the mean over the tokens
	PoolLastToken Pooling = "last_token" // the last token's state
)

// Config is what a sentence-transformers directory says about turning
// token states into one vector.
type Config struct {
	Pooling   Pooling
	Normalize bool // a Normalize module follows pooling (unit L2 length)
	// MaxSeqLen is the tokens a text is cut to, special ones included
	// (sentence_bert_config.json's max_seq_length, else the model's
	// position count).
	MaxSeqLen int
	// Matryoshka: the model was trained so that a prefix of its vector is
	// an embedding too, which is what the OpenAI `dimensions` parameter
	// asks for. It is read from the model card's tags (README.md front
	// matter): "matryoshka", or a sentence-transformers training tag
	// "loss:MatryoshkaLoss" / "loss:Matryoshka2dLoss"; a model without them
	// refuses `dimensions`.
	Matryoshka bool
	// Prompts are the texts put before inputs by name
	// (config_sentence_transformers.json's prompts: Qwen3-Embedding's
	// "query" is "Instruct: …\nQuery:"); DefaultPrompt names the one used
	// when a request names none ("": none).
	Prompts       map[string]string
	DefaultPrompt string
	// ExcludePrompt: the pooling leaves the prompt's tokens out
	// (1_Pooling's include_prompt false), which this package does not
	// do, so a prompted input is refused.
	ExcludePrompt bool
}

type moduleJSON struct {
	Path string `json:"path"`
	Type string `json:"type"`
}

type poolingJSON struct {
	IncludePrompt *bool `json:"include_prompt"`
	CLS           bool  `json:"pooling_mode_cls_token"`
	Mean          bool  `json:"pooling_mode_mean_tokens"`
	Max           bool  `json:"pooling_mode_max_tokens"`
	MeanSqrt      bool  `json:"pooling_mode_mean_sqrt_len_tokens"`
	WeightedM     bool  `json:"pooling_mode_weightedmean_tokens"`
	LastToken     bool  `json:"pooling_mode_lasttoken"`
}

// ErrUnsupported: the directory asks for a module or pooling this package
// does not implement.
var ErrUnsupported = errors.New("unsupported sentence-transformers setting")

// ErrUnknownPrompt: a request names a prompt the model does not have.
var ErrUnknownPrompt = errors.New("unknown prompt")

// ReadConfig reads modules.json, the pooling module's config.json,
// sentence_bert_config.json and README.md of dir. Without modules.json
// the model is pooled by mean and not normalized (sentence-transformers'
// default for a bare transformer). maxPositions bounds MaxSeqLen.
func ReadConfig(dir string, maxPositions int) (Config, error) {
	c := Config{Pooling: PoolMean, MaxSeqLen: maxPositions}
	var modules []moduleJSON
	ok, err := readJSON(filepath.Join(dir, "modules.json"), &modules)
	if err != nil {
		return c, err
	}
	if ok {
		for _, m := range modules {
			switch m.Type {
			case "sentence_transformers.models.Transformer":
			case "sentence_transformers.models.Pooling":
				if c.Pooling, c.ExcludePrompt, err = readPooling(filepath.Join(dir, m.Path, "config.json")); err != nil {
					return c, err
				}
			case "sentence_transformers.models.Normalize":
				c.Normalize = true
			default:
				return c, fmt.Errorf("%w: module %q", ErrUnsupported, m.Type)
			}
		}
	}
	var st struct {
		MaxSeqLength int `json:"max_seq_length"`
	}
	if _, err := readJSON(filepath.Join(dir, "sentence_bert_config.json"), &st); err != nil {
		return c, err
	}
	if st.MaxSeqLength > 0 && st.MaxSeqLength < c.MaxSeqLen {
		c.MaxSeqLen = st.MaxSeqLength
	}
	if c.Matryoshka, err = readMatryoshka(filepath.Join(dir, "README.md")); err != nil {
		return c, err
	}
	var stc struct {
		Prompts           map[string]string `json:"prompts"`
		DefaultPromptName *string           `json:"default_prompt_name"`
	}
	if _, err := readJSON(filepath.Join(dir, "config_sentence_transformers.json"), &stc); err != nil {
		return c, err
	}
	c.Prompts = stc.Prompts
	if n := stc.DefaultPromptName; n != nil && *n != "" {
		if _, ok := c.Prompts[*n]; !ok {
			return c, fmt.Errorf("config_sentence_transformers.json: default_prompt_name %q is not among the prompts", *n)
		}
		c.DefaultPrompt = *n
	}
	return c, nil
}

func readPooling(path string) (_ Pooling, excludePrompt bool, _ error) {
	var p poolingJSON
	ok, err := readJSON(path, &p)
	if err != nil {
		return "", false, err
	}
	if !ok {
		return "", false, fmt.Errorf("%s is missing", path)
	}
	excludePrompt = p.IncludePrompt != nil && !*p.IncludePrompt
	var modes []Pooling
	if p.CLS {
		modes = append(modes, PoolCLS)
	}
	if p.Mean {
		modes = append(modes, PoolMean)
	}
	if p.LastToken {
		modes = append(modes, PoolLastToken)
	}
	if p.Max || p.MeanSqrt || p.WeightedM || len(modes) != 1 {
		return "", false, fmt.Errorf("%w: %s: pooling %+v (want exactly one of cls, mean, last token)", ErrUnsupported, path, p)
	}
	return modes[0], excludePrompt, nil
}

// readMatryoshka looks for the Matryoshka tags in the YAML front matter of
// a model card.
func readMatryoshka(path string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() || strings.TrimSpace(sc.Text()) != "---" {
		return false, sc.Err()
	}
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "---" {
			break
		}
		tag, ok := strings.CutPrefix(line, "- ")
		if !ok {
			continue
		}
		switch strings.Trim(strings.TrimSpace(tag), `"'`) {
		case "matryoshka", "loss:MatryoshkaLoss", "loss:Matryoshka2dLoss":
			return true, nil
		}
	}
	return false, sc.Err()
}

// readJSON decodes an optional file; false if it does not exist.
func readJSON(path string, v any) (bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return true, nil
}

// IsEmbeddingModel reports whether the model directory holds an
// embedding model this package serves: a BERT-family encoder (config.json's
// model_type is bert, roberta or xlm-roberta), or any other model in the sentence-transformers
// layout (modules.json with a Pooling module), a decoder embedding model
// such as Qwen3-Embedding.
func IsEmbeddingModel(dir string) bool {
	if model.IsEncoderType(modelType(dir)) {
		return true
	}
	var modules []moduleJSON
	if ok, err := readJSON(filepath.Join(dir, "modules.json"), &modules); !ok || err != nil {
		return false
	}
	return slices.ContainsFunc(modules, func(m moduleJSON) bool { return m.Type == "sentence_transformers.models.Pooling" })
}

// modelType is config.json's model_type ("" if unreadable).
func modelType(dir string) string {
	var c struct {
		ModelType string `json:"model_type"`
	}
	if ok, err := readJSON(filepath.Join(dir, "config.json"), &c); !ok || err != nil {
		return ""
	}
	return c.ModelType
}
