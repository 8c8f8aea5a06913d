package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu"
)

// Backend names of Config.Backend and ModelSettings.Backend.
const (
	// BackendAuto is MLX when its library loads and reports a Metal GPU,
	// the CPU backend otherwise (MLX on its CPU device is ~10× slower than
	// ours on this kind of machine).
	BackendAuto = "auto"
	BackendMLX  = "mlx"
	BackendCPU  = "cpu"
)

// BackendStatus says which compute backend the runner's models run on and
// why; /health shows it.
type BackendStatus struct {
	// Requested is Config.Backend: auto, mlx or cpu.
	Requested string `json:"requested"`
	// Name is the backend models load on unless their settings name
	// another: mlx or cpu.
	Name string `json:"name"`
	// Reason says why Name was chosen when that was not just what was
	// asked (auto's choice, MLX unavailable).
	Reason string `json:"reason,omitempty"`
	// Models lists the models whose settings choose a backend, with the
	// backend they load on.
	Models map[string]string `json:"models,omitempty"`
	MLX    MLXStatus         `json:"mlx"`
}

// MLXStatus is what the runner found of MLX.
type MLXStatus struct {
	// Probed is false when nothing asked for MLX (--backend cpu), so its
	// library was not loaded.
	Probed    bool   `json:"probed"`
	Available bool   `json:"available"`
	Error     string `json:"error,omitempty"` // why not available
	Library   string `json:"library,omitempty"`
	Version   string `json:"version,omitempty"`
	Device    string `json:"device,omitempty"` // "gpu" (Metal) or "cpu"
	// MemoryLimit and CacheLimit are the limits applied (0: MLX's own).
	MemoryLimit int64 `json:"memory_limit,omitempty"`
	CacheLimit  int64 `json:"cache_limit,omitempty"`
}

// MLXMemory is MLX's allocator counters, in bytes.
type MLXMemory struct {
	Active, Peak, Cache int64
}

// mlxRuntime is the runner's own MLX thread, kept while MLX serves, for
// its memory counters (they are process-wide).
type mlxRuntime interface {
	Memory(ctx context.Context) (MLXMemory, error)
	ResetPeak(ctx context.Context) error
	Close() error
}

// WrapBackend, when set in Config, is given every backend the runner
// makes for a model and returns the one the model uses: tests wrap it to
// inject faults.
type WrapBackend func(model string, b backend.Backend) backend.Backend

// backends is the runner's choice of compute backends, made once by New.
type backends struct {
	status BackendStatus
	rt     mlxRuntime // nil unless MLX serves a model
	limits mlxLimits
	wrap   WrapBackend
}

type mlxLimits struct{ memory, cache int64 }

func validBackend(s string) bool {
	return s == BackendAuto || s == BackendMLX || s == BackendCPU
}

// resolveBackends checks the backend settings, loads MLX when something
// may use it, and decides what auto means on this machine (logged once).
func resolveBackends(cfg Config) (*backends, error) {
	req := cfg.Backend
	if req == "" {
		req = BackendAuto
	}
	if !validBackend(req) {
		return nil, fmt.Errorf("backend %q is not auto, mlx or cpu", cfg.Backend)
	}
	if cfg.MLXMemoryLimit < 0 || cfg.MLXCacheLimit < 0 {
		return nil, fmt.Errorf("MLX memory limit %d and cache limit %d must not be negative", cfg.MLXMemoryLimit, cfg.MLXCacheLimit)
	}
	if cfg.MLXMemoryLimit > 0 && cfg.MLXCacheLimit > cfg.MLXMemoryLimit {
		return nil, fmt.Errorf("MLX cache limit %d is over the memory limit %d", cfg.MLXCacheLimit, cfg.MLXMemoryLimit)
	}
	needMLX := req != BackendCPU
	names := make([]string, 0, len(cfg.Models))
	for name, s := range cfg.Models {
		if s.Backend == "" {
			continue
		}
		if !validBackend(s.Backend) {
			return nil, fmt.Errorf("model %s: backend %q is not auto, mlx or cpu", name, s.Backend)
		}
		needMLX = needMLX || s.Backend != BackendCPU
		names = append(names, name)
	}
	sort.Strings(names)
	b := &backends{status: BackendStatus{Requested: req}, limits: mlxLimits{cfg.MLXMemoryLimit, cfg.MLXCacheLimit}, wrap: cfg.WrapBackend}
	var rt mlxRuntime
	if needMLX {
		b.status.MLX.Probed = true
		var err error
		rt, err = openMLX(&b.status.MLX, b.limits)
		if err != nil {
			b.status.MLX.Error = err.Error()
		}
	}
	b.status.Name, b.status.Reason = b.choose(req)
	log := cfg.Logger.With("requested", req)
	if b.status.MLX.Probed {
		log = log.With("mlx_available", b.status.MLX.Available, "mlx_device", b.status.MLX.Device)
	}
	level := slog.LevelInfo
	if req == BackendMLX && b.status.Name != BackendMLX {
		level = slog.LevelWarn
	}
	log.Log(context.Background(), level, "compute backend", "backend", b.status.Name, "reason", b.status.Reason)
	usesMLX := b.status.Name == BackendMLX
	for _, name := range names {
		got, why := b.choose(cfg.Models[name].Backend)
		if b.status.Models == nil {
			b.status.Models = map[string]string{}
		}
		b.status.Models[name] = got
		usesMLX = usesMLX || got == BackendMLX
		cfg.Logger.Info("compute backend of a model", "model", name, "requested", cfg.Models[name].Backend, "backend", got, "reason", why)
	}
	if rt != nil && !usesMLX {
		// MLX loaded but serves nothing: no thread kept for it.
		err := rt.Close()
		rt = nil
		if err != nil {
			return nil, err
		}
	}
	b.rt = rt
	return b, nil
}

// choose turns a requested backend into the one used, with the reason.
func (b *backends) choose(req string) (name, reason string) {
	m := b.status.MLX
	switch req {
	case BackendCPU:
		return BackendCPU, ""
	case BackendMLX:
		if !m.Available {
			return BackendCPU, "MLX is unavailable: " + m.Error
		}
		if m.Device != "gpu" {
			return BackendMLX, "asked for; MLX has only its CPU device here"
		}
		return BackendMLX, ""
	default:
		if !m.Available {
			return BackendCPU, "auto: MLX is unavailable: " + m.Error
		}
		if m.Device == "gpu" {
			return BackendMLX, "auto: MLX reports a Metal GPU"
		}
		return BackendCPU, "auto: MLX loads but has only its CPU device, where the CPU backend is faster (--backend mlx uses it anyway)"
	}
}

// forModel is the backend the model loads on.
func (b *backends) forModel(model string) string {
	if name, ok := b.status.Models[model]; ok {
		return name
	}
	return b.status.Name
}

// newBackend makes the backend model loads on, with its KV block size (the
// positions its caches grow by) and the name of its KV block layout (part
// of the prefix cache's key).
func (b *backends) newBackend(model string, threads int) (be backend.Backend, kvBlock int, layout string, err error) {
	name := b.forModel(model)
	switch name {
	case BackendMLX:
		be, kvBlock, layout, err = newMLXBackend(b.limits)
	default:
		be, kvBlock, layout = cpu.New(cpu.Options{Threads: threads}), cpu.BlockSize, cpu.KVLayout
	}
	if err != nil {
		return nil, 0, "", err
	}
	if b.wrap != nil {
		be = b.wrap(model, be)
	}
	return be, kvBlock, layout, nil
}

// kvLayout is the KV block layout of the backend model loads on.
func (b *backends) kvLayout(model string) string {
	if b.forModel(model) == BackendMLX {
		return mlxKVLayout()
	}
	return cpu.KVLayout
}

func (b *backends) close() error {
	if b.rt == nil {
		return nil
	}
	return b.rt.Close()
}

// errNoMLXServing is MLXMemory's answer when MLX serves no model.
var errNoMLXServing = errors.New("MLX serves no model on this node")

// BackendStatus is the runner's choice of compute backends.
func (r *Runner) BackendStatus() BackendStatus {
	s := r.backends.status
	s.Models = maps.Clone(s.Models)
	return s
}

// MLXMemory reads MLX's allocator counters (process-wide) when MLX serves
// a model of this runner.
func (r *Runner) MLXMemory(ctx context.Context) (MLXMemory, error) {
	if r.backends.rt == nil {
		return MLXMemory{}, errNoMLXServing
	}
	return r.backends.rt.Memory(ctx)
}

// ResetMLXPeak sets MLX's peak counter (process-wide) to its active
// memory, when MLX serves a model of this runner.
func (r *Runner) ResetMLXPeak(ctx context.Context) error {
	if r.backends.rt == nil {
		return errNoMLXServing
	}
	return r.backends.rt.ResetPeak(ctx)
}
