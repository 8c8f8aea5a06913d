package embed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"

	"fusion/engine/backend"
	"fusion/engine/model"
	"fusion/engine/tokenizer"
)

// Activation is what a cross-encoder applies to its logit to make a
// score.
type Activation string

// Activations (sentence-transformers' CrossEncoder activation_fn).
const (
	ActSigmoid  Activation = "sigmoid"
	ActIdentity Activation = "identity"
)

// CrossEncoder is a loaded cross-encoder (a BertForSequenceClassification
// or XLMRobertaForSequenceClassification checkpoint with one label, as sentence-transformers' CrossEncoder
// loads it): it scores a query and a document read together.
type CrossEncoder struct {
	// MaxLen is the tokens of a pair, special ones included
	// (tokenizer_config.json's model_max_length, bounded by the
	// positions); longer pairs are cut longest first.
	MaxLen     int
	Activation Activation
	enc        *model.Encoder
	head       *model.SequenceClassifier
	tok        *tokenizer.Tokenizer
}

// crossEncoderArchitectures are the sequence-classification checkpoints
// of the encoders model.Encoder runs, by model_type.
var crossEncoderArchitectures = map[string]string{
	"bert":        "BertForSequenceClassification",
	"roberta":     "RobertaForSequenceClassification",
	"xlm-roberta": "XLMRobertaForSequenceClassification",
}

// IsCrossEncoder reports whether the directory holds a BERT-family
// checkpoint with a sequence-classification head (a reranker).
func IsCrossEncoder(dir string) bool {
	var c struct {
		ModelType     string   `json:"model_type"`
		Architectures []string `json:"architectures"`
	}
	ok, err := readJSON(filepath.Join(dir, "config.json"), &c)
	arch, known := crossEncoderArchitectures[c.ModelType]
	return ok && err == nil && known && slices.Contains(c.Architectures, arch)
}

// LoadCrossEncoder loads the cross-encoder of dir onto be.
func LoadCrossEncoder(ctx context.Context, dir string, be backend.Backend, mmap bool) (*CrossEncoder, error) {
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("embed: %w", err)
	}
	if !tok.HasPairTemplate() {
		return nil, fmt.Errorf("embed: %s: %w: tokenizer.json has no pair template", dir, ErrUnsupported)
	}
	enc, err := model.LoadEncoder(ctx, dir, be, mmap)
	if err != nil {
		return nil, err
	}
	ce := &CrossEncoder{enc: enc, tok: tok, MaxLen: enc.MaxLen()}
	if err := ce.configure(dir); err != nil {
		return nil, errors.Join(fmt.Errorf("embed: %s: %w", dir, err), enc.Close())
	}
	return ce, nil
}

func (ce *CrossEncoder) configure(dir string) error {
	var err error
	if ce.head, err = ce.enc.LoadClassifier(); err != nil {
		return err
	}
	if ce.head.Labels != 1 {
		return fmt.Errorf("%w: %d labels (a reranker has 1)", ErrUnsupported, ce.head.Labels)
	}
	var cfg struct {
		ST struct {
			ActivationFn string `json:"activation_fn"`
		} `json:"sentence_transformers"`
		Legacy string `json:"sbert_ce_default_activation_function"`
	}
	if _, err := readJSON(filepath.Join(dir, "config.json"), &cfg); err != nil {
		return err
	}
	fn := cfg.ST.ActivationFn
	if fn == "" {
		fn = cfg.Legacy
	}
	switch fn {
	case "", "torch.nn.modules.activation.Sigmoid", "torch.nn.Sigmoid":
		ce.Activation = ActSigmoid // sentence-transformers' default for one label
	case "torch.nn.modules.linear.Identity", "torch.nn.Identity":
		ce.Activation = ActIdentity
	default:
		return fmt.Errorf("%w: activation_fn %q", ErrUnsupported, fn)
	}
	var tc struct {
		ModelMaxLength float64 `json:"model_max_length"`
	}
	if _, err := readJSON(filepath.Join(dir, "tokenizer_config.json"), &tc); err != nil {
		return err
	}
	if tc.ModelMaxLength >= 1 && tc.ModelMaxLength < float64(ce.MaxLen) {
		ce.MaxLen = int(tc.ModelMaxLength)
	}
	return nil
}

// Close releases the weights.
func (ce *CrossEncoder) Close() error { return ce.enc.Close() }

// WeightBytes is the memory the backend holds for the encoder's weights.
func (ce *CrossEncoder) WeightBytes() int64 { return ce.enc.WeightBytes() }

// Tokenizer is the model's tokenizer.
func (ce *CrossEncoder) Tokenizer() *tokenizer.Tokenizer { return ce.tok }

// Pair tokenizes a query and a document together (ids and token types),
// cut to MaxLen longest first.
func (ce *CrossEncoder) Pair(query, doc string) (ids, types []int, truncated bool) {
	return ce.tok.EncodePairWithin(query, doc, ce.MaxLen)
}

// Scores runs the pairs (as Pair makes them) through the encoder in one
// batch and returns each one's score: the head's logit through the
// activation.
func (ce *CrossEncoder) Scores(ctx context.Context, seqs, types [][]int) ([]float32, error) {
	states, err := ce.enc.ForwardTyped(ctx, seqs, types)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(states))
	for i, st := range states {
		x := float64(ce.head.Logits(st)[0])
		if ce.Activation == ActSigmoid {
			x = 1 / (1 + math.Exp(-x))
		}
		out[i] = float32(x)
	}
	return out, nil
}
