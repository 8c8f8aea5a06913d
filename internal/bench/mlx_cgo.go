//go:build cgo

package bench

import (
	"context"
	"time"

	"fusion/engine/backend"
	"fusion/engine/backend/mlx"
	"fusion/engine/model"
)

// runFusionMLX loads the model on the MLX backend (native mode), warms up
// with a short prompt, then repeat times prefills prompt on a fresh
// sequence in one step and decodes greedily for decode more tokens. It
// also returns facts about the library for the report.
func runFusionMLX(ctx context.Context, path string, prompt []int, decode, repeat int) (mlxSpeed, map[string]any) {
	lib, version := mlx.Library()
	info := map[string]any{"libmlxc": lib, "mlx_version": version}
	if err := mlx.Available(); err != nil {
		return mlxSpeed{Error: err.Error()}, info
	}
	be, err := mlx.New(mlx.Options{})
	if err != nil {
		return mlxSpeed{Error: err.Error()}, info
	}
	defer be.Close()
	info["mlx_gpu"] = be.Runtime().GPU()
	var r mlxSpeed
	err = func() error {
		m, err := model.Load(ctx, path, be, model.Options{})
		if err != nil {
			return err
		}
		defer m.Close()
		if _, err := greedy(ctx, m, prompt[:16], 1); err != nil {
			return err
		}
		for range repeat {
			start := time.Now()
			toks, err := greedy(ctx, m, prompt, decode+1, func(i int) {
				if i == 0 {
					r.PrefillRuns = append(r.PrefillRuns, float64(len(prompt))/time.Since(start).Seconds())
					start = time.Now()
				}
			})
			if err != nil {
				return err
			}
			r.DecodeRuns = append(r.DecodeRuns, float64(decode)/time.Since(start).Seconds())
			r.Tokens = toks
		}
		return nil
	}()
	if err != nil {
		return mlxSpeed{Error: err.Error()}, info
	}
	r.PrefillTokS, r.DecodeTokS = median(r.PrefillRuns), median(r.DecodeRuns)
	return r, info
}

// greedy prefills prompt on a new sequence in one step, then feeds back
// the argmax until n tokens are chosen; after each token, done(i) runs.
func greedy(ctx context.Context, m *model.Model, prompt []int, n int, done ...func(i int)) ([]int, error) {
	seq, err := m.NewSequence(len(prompt) + n)
	if err != nil {
		return nil, err
	}
	defer seq.Close()
	var toks []int
	next := prompt
	for i := range n {
		out, err := m.Forward(ctx, []model.Input{{Seq: seq, Tokens: next}}, model.Range{}, nil)
		if err != nil {
			return nil, err
		}
		toks = append(toks, argmaxLogits(out.Logits[0]))
		next = toks[i:]
		for _, f := range done {
			f(i)
		}
	}
	return toks, nil
}

// newMLXBackend starts the MLX backend (on MLX's CPU device when the
// library has no GPU), or says why it cannot.
func newMLXBackend() (backend.Backend, error) {
	if err := mlx.Available(); err != nil {
		return nil, err
	}
	return mlx.New(mlx.Options{})
}
