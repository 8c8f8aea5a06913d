package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"fusion/engine/modelfile"
	"fusion/engine/quant"
	"fusion/jobs"
	"fusion/router/admin"
)

// oqResult is a quantization job's result: what was written and, when
// asked, the perplexity of the source and of the result on the bundled
// text.
type oqResult struct {
	Model string `json:"model"` // the new model's name
	quant.Result
	Source    *quant.Score `json:"source_score,omitempty"`
	Quantized *quant.Score `json:"quantized_score,omitempty"`
	// PerplexityDelta is the result's perplexity minus the source's.
	PerplexityDelta *float64 `json:"perplexity_delta,omitempty"`
}

// nodeQuantizer serves POST /admin/api/oq/start.
type nodeQuantizer struct{ n *Node }

// oqSource is the path of a model of the models directory that oQ may
// read: a directory with config.json (safetensors), or a GGUF file named
// MODEL.gguf (MODEL being the id the models list gives it) or MODEL
// itself when it ends in .gguf. Whether it is a float model that oQ
// takes is quant.CheckSource's to say.
func oqSource(modelsDir, model string) (string, bool) {
	dir := filepath.Join(modelsDir, model)
	if st, err := os.Stat(filepath.Join(dir, modelfile.ConfigFile)); err == nil && st.Mode().IsRegular() {
		return dir, true
	}
	for _, p := range []string{dir + ".gguf", dir} {
		if quant.IsGGUF(p) {
			return p, true
		}
	}
	return "", false
}

// OQName is the default name of a quantized model.
func OQName(req admin.OQRequest) string {
	req.Model = strings.TrimSuffix(req.Model, ".gguf")
	if strings.EqualFold(req.Format, quant.FormatGGUF) {
		return req.Model + "-" + strings.ToUpper(req.Type)
	}
	if req.TargetBits > 0 {
		return req.Model + "-oq" + strconv.FormatFloat(req.TargetBits, 'f', -1, 64)
	}
	bits := req.Bits
	if bits == 0 {
		bits = quant.DefaultBits
	}
	return req.Model + "-oq" + strconv.Itoa(bits)
}

// Quantize starts a job that writes the quantized model into the models
// directory: a directory, or for a GGUF output the file <name>.gguf.
func (q nodeQuantizer) Quantize(ctx context.Context, req admin.OQRequest) (jobs.Job, error) {
	n := q.n
	req.Node = n.jobs.Node()
	gguf := strings.EqualFold(req.Format, quant.FormatGGUF)
	if gguf {
		req.Name = strings.TrimSuffix(req.Name, ".gguf")
	}
	if req.Name == "" {
		req.Name = OQName(req)
	}
	src, ok := oqSource(n.cfg.ModelsDir, req.Model)
	if !ok {
		return jobs.Job{}, fmt.Errorf("%w: %q", admin.ErrNoModel, req.Model)
	}
	check := quant.CheckSource
	if gguf {
		check = quant.CheckGGUFSource
	}
	if err := check(src); err != nil {
		return jobs.Job{}, err
	}
	dst := filepath.Join(n.cfg.ModelsDir, req.Name)
	for _, p := range []string{dst, dst + ".gguf"} {
		if _, err := os.Stat(p); err == nil {
			return jobs.Job{}, fmt.Errorf("%w: %q", admin.ErrNameTaken, req.Name)
		}
	}
	if gguf {
		dst = quant.GGUFPath(dst)
	}
	o := quant.Options{Bits: req.Bits, GroupSize: req.GroupSize, TargetBits: req.TargetBits, HighBits: req.HighBits,
		Format: req.Format, GGUFType: req.Type, Calibration: req.Calibration()}
	return n.jobs.Submit(ctx, "quantize", req, func(ctx context.Context, r *jobs.Reporter) (any, error) {
		r.SetTotal("steps", 0)
		r.Logf("quantizing %s into %s", req.Model, req.Name)
		o.Progress = func(done, total int) {
			r.SetTotal("steps", int64(total))
			r.SetDone(int64(done))
		}
		o.Log = func(msg string) { r.Logf("%s", msg) }
		res, err := quant.Quantize(ctx, src, dst, o)
		if err != nil {
			r.Logf("failed: %v", err)
			return nil, err
		}
		out := oqResult{Model: req.Name, Result: res}
		out.Dir = "" // the node's path means little to a client
		if req.Evaluate {
			r.Logf("measuring perplexity on the bundled text")
			s, err := quant.Perplexity(ctx, src, quant.EvalText, 0)
			if err != nil {
				return nil, fmt.Errorf("perplexity of the source: %w", err)
			}
			d, err := quant.Perplexity(ctx, dst, quant.EvalText, 0)
			if err != nil {
				return nil, fmt.Errorf("perplexity of the result: %w", err)
			}
			delta := d.Perplexity - s.Perplexity
			out.Source, out.Quantized, out.PerplexityDelta = &s, &d, &delta
			r.Logf("perplexity %.4g → %.4g", s.Perplexity, d.Perplexity)
		}
		return out, nil
	})
}
