package runner

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"fusion/engine"
	"fusion/engine/modelfile"
)

// modelSettings returns the settings of the model name (zero if none).
func (r *Runner) modelSettings(name string) ModelSettings {
	r.settingsMu.Lock()
	defer r.settingsMu.Unlock()
	return r.cfg.Models[name]
}

// SetModelSettings replaces the settings of the model name, for its next
// load and, when it is loaded, at once: sampling defaults, context cap,
// idle TTL, pin and drafting (num_draft_tokens, speculative) apply to the
// next request. A new chat template, parser or draft model needs the
// model loaded again: an idle loaded model is unloaded
// (its next request loads it with them), a busy one takes them at its
// next load. The model need not exist here (settings may name a model
// another node has).
func (r *Runner) SetModelSettings(name string, s ModelSettings) {
	r.settingsMu.Lock()
	if r.cfg.Models == nil {
		r.cfg.Models = map[string]ModelSettings{}
	}
	r.cfg.Models[name] = s
	r.settingsMu.Unlock()
	r.mu.Lock()
	e, ok := r.models[name]
	if !ok {
		r.mu.Unlock()
		return
	}
	e.pinned = s.Pinned
	var stale *loadedModel
	if lm := e.loaded; lm != nil {
		old := lm.settings()
		lm.setSettings(s)
		if (old.ChatTemplate != s.ChatTemplate || old.Parser != s.Parser || old.DraftModel != s.DraftModel) && e.active == 0 && e.loading == nil {
			stale, e.loaded = lm, nil
		}
	}
	r.mu.Unlock()
	if stale != nil {
		r.cfg.Logger.Info("model unloaded: its chat template, parser or draft model changed", "model", name)
		if err := stale.close(); err != nil {
			r.cfg.Logger.Warn("closing a model", "model", name, "err", err)
		}
	}
}

func (lm *loadedModel) setSettings(s ModelSettings) { lm.live.Store(&s) }

// settings are the model's settings in force.
func (lm *loadedModel) settings() ModelSettings {
	if s := lm.live.Load(); s != nil {
		return *s
	}
	return ModelSettings{}
}

// ModelDetails describe a model of the models dir from its files, without
// loading it.
type ModelDetails struct {
	ID           string
	Format       string // safetensors or gguf
	Kind         string // engine.KindChat, KindEmbedding or KindRerank
	Bytes        int64  // size of its files
	Architecture string // from config.json ("" when unknown)
	ModelType    string
	Quantization string // "" (not quantized), "affine 4-bit/64", or the unsupported quant_method
	// ContextLength is the model's own (0 when unknown).
	ContextLength int
	// Compatible is false when this engine cannot load the model;
	// Reason then says why.
	Compatible bool
	Reason     string
	Backend    string // the backend that runs it here
}

// Details describes every model of the models dir, by name. Reading a
// config.json that this engine cannot load marks the model incompatible
// instead of failing.
func (r *Runner) Details() []ModelDetails {
	list := r.List()
	r.mu.Lock()
	infos := make([]engine.ModelInfo, 0, len(list))
	for _, s := range list {
		if e, ok := r.models[s.ID]; ok {
			infos = append(infos, e.info)
		}
	}
	r.mu.Unlock()
	out := make([]ModelDetails, 0, len(infos))
	listed := map[string]bool{}
	for _, info := range infos {
		d := describe(info, r.ggufInfo.get)
		d.Backend = r.backends.forModel(info.ID)
		out = append(out, d)
		listed[info.Path] = true
	}
	r.ggufInfo.keep(listed)
	return out
}

// describe reads what a model's files say about it; inspectGGUF is
// model.InspectGGUF or a cache of its answers.
func describe(info engine.ModelInfo, inspectGGUF func(path string) (*modelfile.Config, error)) ModelDetails {
	d := ModelDetails{ID: info.ID, Format: info.Format, Kind: info.Kind, Bytes: dirBytes(info.Path), Compatible: true}
	if info.Format == string(modelfile.KindGGUF) {
		cfg, err := inspectGGUF(info.Path)
		if err != nil {
			d.Compatible, d.Reason = false, err.Error()
			return d
		}
		d.ModelType, d.Architecture, d.ContextLength = cfg.ModelType, cfg.Architecture, cfg.MaxPositionEmbeddings
		return d
	}
	if info.Format != string(modelfile.KindSafetensors) {
		return d
	}
	raw, err := os.ReadFile(filepath.Join(info.Path, modelfile.ConfigFile))
	if err != nil {
		d.Compatible, d.Reason = false, err.Error()
		return d
	}
	var head struct {
		ModelType     string   `json:"model_type"`
		Architectures []string `json:"architectures"`
		MaxPositions  int      `json:"max_position_embeddings"`
		Quantization  *struct {
			QuantMethod string `json:"quant_method"`
			Bits        int    `json:"bits"`
			GroupSize   int    `json:"group_size"`
			Mode        string `json:"mode"`
		} `json:"quantization"`
		QuantizationConfig *struct {
			QuantMethod string `json:"quant_method"`
			Bits        int    `json:"bits"`
			GroupSize   int    `json:"group_size"`
			Mode        string `json:"mode"`
		} `json:"quantization_config"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		d.Compatible, d.Reason = false, "config.json: "+err.Error()
		return d
	}
	d.ModelType, d.ContextLength = head.ModelType, head.MaxPositions
	if len(head.Architectures) > 0 {
		d.Architecture = head.Architectures[0]
	}
	q := head.Quantization
	if q == nil {
		q = head.QuantizationConfig
	}
	if q != nil {
		switch {
		case q.QuantMethod != "" && q.QuantMethod != "mlx":
			d.Quantization = q.QuantMethod
		case q.Mode != "" && q.Mode != modelfile.ModeAffine:
			d.Quantization = q.Mode // mxfp4, mxfp8, nvfp4: their bits and group are fixed
		case q.Bits > 0:
			d.Quantization = "affine " + strconv.Itoa(q.Bits) + "-bit/" + strconv.Itoa(q.GroupSize)
		}
	}
	if info.Kind == engine.KindEmbedding || info.Kind == engine.KindRerank || info.Kind == engine.KindTranscription || info.Kind == engine.KindSpeech {
		return d
	}
	cfg, err := modelfile.ParseConfig(raw)
	if err != nil {
		d.Compatible, d.Reason = false, err.Error()
		return d
	}
	d.Architecture, d.ContextLength = cfg.Architecture, cfg.MaxPositionEmbeddings
	return d
}

// dirBytes is the size of a file, or of the regular files under a
// directory.
func dirBytes(path string) int64 {
	var n int64
	_ = filepath.WalkDir(path, func(_ string, de fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if de.Type().IsRegular() {
			if fi, err := de.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
