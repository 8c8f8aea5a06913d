package embed

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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
}

type moduleJSON struct {
	Path string `json:"path"`
	Type string `json:"type"`
}

type poolingJSON struct {
	CLS       bool `json:"pooling_mode_cls_token"`
	Mean      bool `json:"pooling_mode_mean_tokens"`
	Max       bool `json:"pooling_mode_max_tokens"`
	MeanSqrt  bool `json:"pooling_mode_mean_sqrt_len_tokens"`
	WeightedM bool `json:"pooling_mode_weightedmean_tokens"`
	LastToken bool `json:"pooling_mode_lasttoken"`
}

// ErrUnsupported: the directory asks for a module or pooling this package
// does not implement.
var ErrUnsupported = errors.New("unsupported sentence-transformers setting")

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
				if c.Pooling, err = readPooling(filepath.Join(dir, m.Path, "config.json")); err != nil {
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
	return c, nil
}

func readPooling(path string) (Pooling, error) {
	var p poolingJSON
	ok, err := readJSON(path, &p)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("%s is missing", path)
	}
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
		return "", fmt.Errorf("%w: %s: pooling %+v (want exactly one of cls, mean, last token)", ErrUnsupported, path, p)
	}
	return modes[0], nil
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

// IsEmbeddingModel reports whether the model directory holds an encoder
// this package serves (config.json's model_type is bert).
func IsEmbeddingModel(dir string) bool {
	var c struct {
		ModelType string `json:"model_type"`
	}
	ok, err := readJSON(filepath.Join(dir, "config.json"), &c)
	return ok && err == nil && c.ModelType == "bert"
}
