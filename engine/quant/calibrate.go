package quant

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"fusion/engine/modelfile"
	"fusion/engine/safetensors"
	"fusion/engine/tensor"
)

// MaxCalibrationTokens bounds the calibration text a plan scores: the
// source's log-probabilities are kept for every predicted position
// (tokens × vocabulary float32s).
const MaxCalibrationTokens = 1024

// CalibrationText is a short English text bundled as the default
// calibration text of a mixed plan (written for this package; distinct
// from EvalText, the held-out text).
//
//go:embed calib.txt
var CalibrationText string

// overlayWeights is the file of a calibration overlay holding the one
// tensor under test.
const overlayWeights = "oq-candidate.safetensors"

// calibrator measures how much quantizing one tensor alone moves the
// source model's predictions on a calibration text: the mean KL
// divergence, nats per predicted token, of the candidate's next-token
// distribution from the source's.
//
// A candidate is an overlay directory beside the destination: symlinks
// to the source's files, and an index whose weight map sends the tensor
// under test to a small file holding its quantized-then-dequantized
// values (float32), the rest to the source's own files. So each
// candidate costs one forward pass of the text and no copy of the model.
type calibrator struct {
	ids    []int
	window int
	ref    [][]float32 // the source's log-softmax at every predicted position
	dir    string      // the overlay
	owner  map[string]string
}

func newCalibrator(ctx context.Context, s *source, src, parent string, o Options) (*calibrator, error) {
	tok, err := loadTokenizer(src)
	if err != nil {
		return nil, fmt.Errorf("quant: tokenizer: %w", err)
	}
	ids := tok.Encode(o.Calibration, true)
	if len(ids) > MaxCalibrationTokens {
		ids = ids[:MaxCalibrationTokens]
	}
	if len(ids) < 2 {
		return nil, fmt.Errorf("%w: the calibration text has %d tokens, it needs 2", ErrBadOptions, len(ids))
	}
	c := &calibrator{ids: ids, window: o.CalibrationWindow}
	err = forwardRows(ctx, src, ids, c.window, func(row []float32, _ int) {
		c.ref = append(c.ref, logSoftmax(row))
	})
	if err != nil {
		return nil, err
	}
	if c.owner, err = weightOwners(s, src); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	if c.dir, err = os.MkdirTemp(parent, ".oq-calibrate-"); err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		c.close()
		return nil, fmt.Errorf("quant: %w", err)
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		c.close()
		return nil, fmt.Errorf("quant: %w", err)
	}
	for _, e := range ents {
		if e.Name() == modelfile.IndexFile || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if err := os.Symlink(filepath.Join(abs, e.Name()), filepath.Join(c.dir, e.Name())); err != nil {
			c.close()
			return nil, fmt.Errorf("quant: %w", err)
		}
	}
	return c, nil
}

// weightOwners maps every tensor of the source to the file holding it:
// the source's index when it has one, else each file's own list.
func weightOwners(s *source, src string) (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(src, modelfile.IndexFile))
	switch {
	case err == nil:
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(b, &idx); err != nil {
			return nil, fmt.Errorf("quant: %s: %w", modelfile.IndexFile, err)
		}
		return idx.WeightMap, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("quant: %w", err)
	}
	owner := map[string]string{}
	for _, p := range s.w.Files() {
		f, err := safetensors.Open(p, safetensors.LoadMmap)
		if err != nil {
			return nil, fmt.Errorf("quant: %w", err)
		}
		for _, n := range f.Names() {
			owner[n] = filepath.Base(p)
		}
		f.Close()
	}
	return owner, nil
}

func (c *calibrator) close() {
	if c.dir != "" {
		os.RemoveAll(c.dir)
	}
}

// kl is the mean KL divergence of the source's predictions from those
// of the model with tensor name replaced by values (shape shape).
func (c *calibrator) kl(ctx context.Context, name string, shape []int64, values []float32) (float64, error) {
	t := tensor.Tensor{Name: name, DType: tensor.F32, Shape: shape, Data: tensor.Encode(tensor.F32, values)}
	if err := safetensors.WriteFile(filepath.Join(c.dir, overlayWeights), []tensor.Tensor{t}, map[string]string{"format": "pt"}); err != nil {
		return 0, fmt.Errorf("quant: %w", err)
	}
	wm := make(map[string]string, len(c.owner))
	for n, f := range c.owner {
		wm[n] = f
	}
	wm[name] = overlayWeights
	if err := writeJSON(filepath.Join(c.dir, modelfile.IndexFile), map[string]any{"metadata": map[string]any{}, "weight_map": wm}); err != nil {
		return 0, err
	}
	var sum float64
	i := 0
	err := forwardRows(ctx, c.dir, c.ids, c.window, func(row []float32, _ int) {
		sum += klDiv(c.ref[i], row)
		i++
	})
	if err != nil {
		return 0, err
	}
	return sum / float64(i), nil
}

// logSoftmax is log softmax(row), in float64 then stored as float32.
func logSoftmax(row []float32) []float32 {
	lse := logSumExp(row)
	out := make([]float32, len(row))
	for i, v := range row {
		out[i] = float32(float64(v) - lse)
	}
	return out
}

// klDiv is KL(p‖q) for p given as log-probabilities and q as logits.
func klDiv(logp, logits []float32) float64 {
	logq := logSoftmax(logits)
	var d float64
	for i, lp := range logp {
		p := math.Exp(float64(lp))
		d += p * (float64(lp) - float64(logq[i]))
	}
	return max(d, 0)
}

// fakeQuant is v quantized at bits and dequantized, its scales and
// biases rounded to dt as the written model stores them.
func fakeQuant(v []float32, rows, cols, group, bits int, dt tensor.DType) ([]float32, error) {
	packed, scales, biases, err := modelfile.QuantizeAffine(v, rows, cols, group, bits)
	if err != nil {
		return nil, err
	}
	roundTo(dt, scales)
	roundTo(dt, biases)
	return modelfile.DequantizeAffine(packed, scales, biases, rows, cols, group, bits)
}
