package node

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"fusion/engine/modelfile"
	"fusion/engine/quant"
	"fusion/jobs"
	"fusion/router/admin"
)

// OQPlanFile is the file of the new model's directory that holds a mixed
// plan's per-tensor figures (quant.Result.Plan): they grow with the
// model (about 350 bytes a tensor), so the job's result keeps a summary.
const OQPlanFile = "oq_plan.json"

// oqSensitiveShown is how many of the most and least sensitive tensors
// a mixed plan's result names.
const oqSensitiveShown = 3

// oqResult is a quantization job's result: what was written (its size,
// bits per weight, the widths used with their tensor counts; a mixed
// plan's per-tensor figures in PlanFile, its most and least sensitive
// tensors here) and, when asked, the perplexity of the source and of the
// result on the bundled text. It stays small whatever the model's size.
type oqResult struct {
	Model string `json:"model"` // the new model's name
	quant.Result
	// PlanFile is the file in the new model's directory holding the
	// mixed plan (quant.Result.Plan, left out here).
	PlanFile       string       `json:"plan_file,omitempty"`
	MostSensitive  []oqTensor   `json:"most_sensitive,omitempty"`
	LeastSensitive []oqTensor   `json:"least_sensitive,omitempty"`
	Source         *quant.Score `json:"source_score,omitempty"`
	Quantized      *quant.Score `json:"quantized_score,omitempty"`
	// PerplexityDelta is the result's perplexity minus the source's.
	PerplexityDelta *float64 `json:"perplexity_delta,omitempty"`
}

// oqTensor is one tensor of a mixed plan, as the result names it: the
// bits and group size it got, and its cost at the base width (the KL
// divergence on the calibration text when calibrated, else its weights'
// total squared error), by which it ranks.
type oqTensor struct {
	Name      string  `json:"name"`
	Bits      int     `json:"bits"`
	GroupSize int     `json:"group_size"`
	Cost      float64 `json:"cost"`
}

// sensitiveEnds are the k tensors of plan that cost most at the base
// width, most first, and the k that cost least, least first.
func sensitiveEnds(plan []quant.TensorPlan, k int) (most, least []oqTensor) {
	all := make([]oqTensor, len(plan))
	for i, p := range plan {
		c := p.BaseMSE * float64(p.Weights)
		if p.Calibrated {
			c = p.BaseKL
		}
		all[i] = oqTensor{Name: p.Name, Bits: p.Bits, GroupSize: p.GroupSize, Cost: c}
	}
	slices.SortStableFunc(all, func(a, b oqTensor) int { return cmp.Compare(b.Cost, a.Cost) })
	k = min(k, len(all))
	most = slices.Clone(all[:k])
	least = slices.Clone(all[len(all)-k:])
	slices.Reverse(least)
	return most, least
}

// oqParams is what a quantization job's record keeps of its request:
// the calibration text's length and the start of its SHA-256 rather
// than the text (up to maxOQBody, more than a cluster's job record
// holds).
type oqParams struct {
	admin.OQRequest
	CalibrationBytes  int    `json:"calibration_bytes,omitempty"`
	CalibrationSHA256 string `json:"calibration_sha256,omitempty"` // its first 16 hex digits
}

func newOQParams(req admin.OQRequest) oqParams {
	p := oqParams{OQRequest: req}
	if t := req.CalibrationText; t != "" {
		sum := sha256.Sum256([]byte(t))
		p.CalibrationBytes, p.CalibrationSHA256 = len(t), hex.EncodeToString(sum[:8])
		p.CalibrationText = ""
	}
	return p
}

// nodeQuantizer serves POST /admin/api/oq/start.
type nodeQuantizer struct{ n *Node }

// source is the path and model id of the float model oQ reads for
// model: one of the models directory (oqSource), else any model this
// node lists (a Hugging Face cache's ORG/NAME, say), by its id or, for a
// GGUF, its id with .gguf.
func (q nodeQuantizer) source(ctx context.Context, model string) (path, id string, ok bool) {
	if p, ok := oqSource(q.n.cfg.ModelsDir, model); ok && !strings.Contains(model, "/") {
		return p, strings.TrimSuffix(model, ".gguf"), true
	}
	b := nodeBench{n: q.n}
	m, err := b.model(ctx, model)
	if err != nil && strings.HasSuffix(model, ".gguf") {
		m, err = b.model(ctx, strings.TrimSuffix(model, ".gguf"))
	}
	if err != nil || m.Path == "" {
		return "", "", false
	}
	return m.Path, m.ID, true
}

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

// OQName is the default name of a quantized model: a plain name in the
// models directory, from the source's last path element (ORG/NAME@REV
// gives NAME-REV).
func OQName(req admin.OQRequest) string {
	req.Model = strings.ReplaceAll(path.Base(strings.TrimSuffix(req.Model, ".gguf")), "@", "-")
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
	src, srcID, ok := q.source(ctx, req.Model)
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
		Format: req.Format, GGUFType: req.Type, Calibration: req.Calibration(), PlanFile: OQPlanFile, SourceModel: srcID}
	return n.jobs.Submit(ctx, "quantize", newOQParams(req), func(ctx context.Context, r *jobs.Reporter) (any, error) {
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
		if len(res.Plan) > 0 {
			out.PlanFile = OQPlanFile
			out.MostSensitive, out.LeastSensitive = sensitiveEnds(res.Plan, oqSensitiveShown)
			out.Plan = nil
		}
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
