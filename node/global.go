package node

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"fusion/router/admin"
)

// Global settings the node changes while it runs; every other one needs a
// restart.
var liveGlobals = map[string]bool{"log_level": true}

// secretGlobals are shown as set/unset and cannot be changed here.
var secretGlobals = map[string]bool{"api_key": true, "cluster_secret": true}

// globalKind is how a setting's value is checked when the program gave
// no CheckSetting.
type globalKind int

const (
	kindString globalKind = iota
	kindCount             // integer ≥ 0
	kindBytes             // integer ≥ -1
	kindDuration
	kindLevel
)

// globalConfig is the node's configuration for the global-settings
// routes: what it runs with, and the replicated overrides.
type globalConfig struct {
	cfg       *Config
	mu        sync.Mutex
	overrides map[string]string
}

// base lists the settings with their values in force: the program's
// resolution when it gave one, else the node's Config.
func (g *globalConfig) base() []admin.GlobalSetting {
	if g.cfg.Effective != nil {
		out := make([]admin.GlobalSetting, len(g.cfg.Effective))
		copy(out, g.cfg.Effective)
		return out
	}
	c := g.cfg
	secret := func(v string) string {
		if v == "" {
			return "unset"
		}
		return "set"
	}
	level := "info"
	if c.LogLevel != nil {
		level = strings.ToLower(c.LogLevel.Level().String())
	}
	i := strconv.Itoa
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	rows := [][2]string{
		{"listen", c.Listen}, {"data_dir", c.DataDir}, {"models_dir", c.ModelsDir},
		{"api_key", secret(c.APIKey)}, {"cluster_secret", secret(c.Cluster.Secret)},
		{"max_body_bytes", i64(c.MaxBodyBytes)}, {"max_tokens", i(c.MaxTokens)}, {"max_queued", i(c.MaxQueued)},
		{"max_running", i(c.MaxRunning)}, {"max_kv_bytes", i64(c.MaxKVBytes)}, {"step_tokens", i(c.StepTokens)},
		{"max_wait", c.MaxWait.String()}, {"memory_budget", i64(c.MemoryBudget)}, {"idle_ttl", c.IdleTTL.String()},
		{"threads", i(c.Threads)}, {"drain_timeout", c.DrainTimeout.String()},
		{"cache_hot_bytes", i64(c.CacheHotBytes)}, {"cache_ssd_bytes", i64(c.CacheSSDBytes)}, {"log_level", level},
	}
	out := make([]admin.GlobalSetting, 0, len(rows))
	for _, r := range rows {
		out = append(out, admin.GlobalSetting{Key: r[0], Value: r[1], Source: "config"})
	}
	return out
}

// kinds of the settings the node checks itself.
var globalKinds = map[string]globalKind{
	"max_body_bytes": kindCount, "max_tokens": kindCount, "max_queued": kindCount, "max_running": kindCount,
	"max_kv_bytes": kindCount, "step_tokens": kindCount, "max_wait": kindDuration, "memory_budget": kindCount,
	"idle_ttl": kindDuration, "threads": kindCount, "drain_timeout": kindDuration,
	"cache_hot_bytes": kindBytes, "cache_ssd_bytes": kindBytes, "log_level": kindLevel,
}

// Effective implements admin.Global.
func (g *globalConfig) Effective() []admin.GlobalSetting {
	g.mu.Lock()
	over := g.overrides
	g.mu.Unlock()
	out := g.base()
	for i := range out {
		s := &out[i]
		s.Live = liveGlobals[s.Key]
		if secretGlobals[s.Key] {
			s.Secret = true
			if s.Value != "unset" {
				s.Value = "set" // whatever the program passed, never a secret's value
			}
			continue
		}
		v, ok := over[s.Key]
		if !ok {
			continue
		}
		switch {
		case s.Live:
			s.Value, s.Source = v, "cluster"
		case s.Source == "flag" || s.Source == "env" || s.Source == "file":
			// This node's own setting wins over the cluster's, now and
			// after a restart.
			s.ClusterValue = v
		case v != s.Value:
			// Changed since this process started (a restart takes it:
			// the program applies StoredGlobalOverrides).
			s.Value, s.Source, s.RestartRequired = v, "cluster", true
		default:
			s.Source = "cluster"
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Check implements admin.Global.
func (g *globalConfig) Check(key, value string) (bool, error) {
	known := false
	for _, s := range g.base() {
		if s.Key == key {
			known = true
			break
		}
	}
	if !known {
		return false, errors.New("unknown setting")
	}
	if secretGlobals[key] {
		return false, errors.New("a secret: set it with its flag, environment variable or file")
	}
	if kind, ok := globalKinds[key]; ok {
		if err := checkKind(kind, value); err != nil {
			return false, err
		}
	}
	if g.cfg.CheckSetting != nil {
		if err := g.cfg.CheckSetting(key, value); err != nil {
			return false, err
		}
	}
	return liveGlobals[key], nil
}

func checkKind(k globalKind, v string) error {
	switch k {
	case kindCount, kindBytes:
		n, err := strconv.ParseInt(v, 10, 64)
		low := int64(0)
		if k == kindBytes {
			low = -1
		}
		if err != nil || n < low {
			return fmt.Errorf("%q is not an integer ≥ %d", v, low)
		}
	case kindDuration:
		if d, err := time.ParseDuration(v); err != nil || d < 0 {
			return fmt.Errorf("%q is not a duration (e.g. 30s)", v)
		}
	case kindLevel:
		if _, err := parseLevel(v); err != nil {
			return err
		}
	}
	return nil
}

func parseLevel(v string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(v)); err != nil {
		return 0, fmt.Errorf("%q is not a level (debug, info, warn, error)", v)
	}
	return l, nil
}

// apply takes the replicated overrides; the live ones change at once.
func (g *globalConfig) apply(over map[string]string) {
	g.mu.Lock()
	g.overrides = over
	g.mu.Unlock()
	if v, ok := over["log_level"]; ok && g.cfg.LogLevel != nil {
		if l, err := parseLevel(v); err == nil {
			g.cfg.LogLevel.Set(l)
		}
	}
}
