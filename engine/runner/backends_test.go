//go:build cgo

package runner

import (
	"context"
	"errors"
	"strings"
	"testing"

	"fusion/engine"
	"fusion/engine/backend"
	"fusion/engine/backend/mlx"
	"fusion/engine/backend/mlx/mlxtest"
	"fusion/engine/demo"
	"fusion/internal/testenv"
)

// TestBackendChoice: the runner's backend and each model's follow
// Config.Backend and ModelSettings.Backend; auto takes MLX only with a
// Metal GPU; bad settings are refused.
func TestBackendChoice(t *testing.T) {
	testenv.NeedMLX(t, mlx.Available())
	models := map[string]demo.Options{"a": {Arch: "qwen3", Seed: 7}, "b": {Arch: "qwen3", Seed: 7}}
	gpu := false
	{
		rt, err := mlx.Open()
		if err != nil {
			t.Fatal(err)
		}
		gpu = rt.GPU()
		rt.Close()
	}
	autoName := BackendCPU
	if gpu {
		autoName = BackendMLX
	}
	tests := []struct {
		name   string
		cfg    Config
		want   string            // the runner's
		models map[string]string // per model, loaded
		reason string
	}{
		{"auto", Config{}, autoName, map[string]string{"a": autoName, "b": autoName}, "auto: "},
		{"cpu", Config{Backend: BackendCPU}, BackendCPU, map[string]string{"a": "cpu", "b": "cpu"}, ""},
		{"mlx", Config{Backend: BackendMLX}, BackendMLX, map[string]string{"a": "mlx", "b": "mlx"}, ""},
		{"cpu, a on mlx", Config{Backend: BackendCPU, Models: map[string]ModelSettings{"a": {Backend: BackendMLX}}}, BackendCPU,
			map[string]string{"a": "mlx", "b": "cpu"}, ""},
		{"mlx, b on cpu", Config{Backend: BackendMLX, Models: map[string]ModelSettings{"b": {Backend: BackendCPU}}}, BackendMLX,
			map[string]string{"a": "mlx", "b": "cpu"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRunnerWith(t, tt.cfg, models)
			st := r.BackendStatus()
			if st.Name != tt.want || !strings.HasPrefix(st.Reason, tt.reason) {
				t.Errorf("status %+v, want %s", st, tt.want)
			}
			for _, s := range r.List() {
				if s.Backend != tt.models[s.ID] {
					t.Errorf("%s before loading: %s, want %s", s.ID, s.Backend, tt.models[s.ID])
				}
			}
			usesMLX := false
			for name, want := range tt.models {
				collect(t, mustGenerate(t, r, chat(name, "hi", 3)))
				usesMLX = usesMLX || want == BackendMLX
			}
			for _, s := range r.List() {
				if s.Backend != tt.models[s.ID] {
					t.Errorf("%s loaded on %s, want %s", s.ID, s.Backend, tt.models[s.ID])
				}
			}
			m, err := r.MLXMemory(context.Background())
			if usesMLX != (err == nil) || (usesMLX && m.Active <= 0) {
				t.Errorf("MLX counters %+v, %v; MLX serves: %v", m, err, usesMLX)
			}
		})
	}

	bad := []Config{
		{Backend: "metal"},
		{Models: map[string]ModelSettings{"a": {Backend: "gpu"}}},
		{MLXMemoryLimit: -1},
		{MLXMemoryLimit: 100, MLXCacheLimit: 200},
	}
	for _, cfg := range bad {
		if r, err := New(cfg); err == nil {
			r.Close()
			t.Errorf("%+v: no error", cfg)
		}
	}
}

func mustGenerate(t *testing.T, r *Runner, req *engine.Request) <-chan engine.Event {
	t.Helper()
	ch, err := r.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// TestMLXLimitsApplied: the MLX memory limit of the config is MLX's own
// (set process-wide, read back by setting it again).
func TestMLXLimitsApplied(t *testing.T) {
	testenv.NeedMLX(t, mlx.Available())
	const limit = 5 << 30
	newRunnerWith(t, Config{Backend: BackendMLX, MLXMemoryLimit: limit, MLXCacheLimit: 1 << 20}, map[string]demo.Options{"a": {Seed: 7}})
	rt, err := mlx.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	prev, err := rt.SetMemoryLimit(context.Background(), limit)
	if err != nil || prev != limit {
		t.Errorf("MLX memory limit %d (%v), want %d", prev, err, limit)
	}
}

// TestForwardErrorFailsRequest: a step that fails with an MLX error, at
// the prefill or in the middle of decoding, fails the requests of that
// step with the error (it is not retried), and the model serves the next
// request with the same answer as before.
func TestForwardErrorFailsRequest(t *testing.T) {
	testenv.NeedMLX(t, mlx.Available())
	var f *mlxtest.Faulty
	r := newRunnerWith(t, Config{Backend: BackendMLX, CacheHotBytes: -1, WrapBackend: func(_ string, be backend.Backend) backend.Backend {
		f = mlxtest.Wrap(be)
		return f
	}}, map[string]demo.Options{"a": {Arch: "qwen3", Seed: 7}})
	want, _, _ := collect(t, mustGenerate(t, r, chat("a", "hi", 6)))
	for _, skip := range []int{0, 3} {
		f.FailSteps(skip, 1)
		var last engine.Event
		n := 0
		for ev := range mustGenerate(t, r, chat("a", "hi", 6)) {
			n += len(ev.Tokens)
			last = ev
		}
		var me *mlx.Error
		if !last.Done || !errors.As(last.Err, &me) || me.Op != "mlx_reshape" || n != skip {
			t.Errorf("skip %d: %d tokens, last event %+v", skip, n, last)
		}
		if got, _, _ := collect(t, mustGenerate(t, r, chat("a", "hi", 6))); got != want {
			t.Errorf("skip %d: after the failure %q, want %q", skip, got, want)
		}
	}
	if f.Failed.Load() != 2 {
		t.Errorf("%d steps failed, want 2", f.Failed.Load())
	}
}
