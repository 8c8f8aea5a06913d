package cloud

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Kinds of upstream: the wire protocol it speaks.
const (
	KindOpenAI    = "openai"    // POST {base_url}/chat/completions, Bearer key
	KindAnthropic = "anthropic" // POST {base_url}/messages, x-api-key
)

// Limits of a configuration.
const (
	MaxUpstreams      = 32
	MaxModels         = 1024 // model mappings per upstream
	MaxNameLen        = 64
	MaxTimeoutSeconds = 3600
	DefaultTimeout    = 60 * time.Second
	// MaxConfigBytes bounds a configuration document.
	MaxConfigBytes = 1 << 20
	// DefaultMaxTokens is the max_tokens an Anthropic upstream is sent
	// when the request gave none (its API requires one).
	DefaultMaxTokens = 4096
)

// Config is the cloud configuration: the upstream providers a request
// with backend_override "cloud" (or a model's cloud_fallback) may go to.
// It holds no secret: each upstream names where its API key is read
// (an environment variable or a file on the node that makes the call).
type Config struct {
	Upstreams []Upstream `json:"upstreams"`
}

// Upstream is one provider.
type Upstream struct {
	// Name identifies it in logs, errors, metrics and X-Fusion-Node
	// ("cloud:NAME").
	Name string `json:"name"`
	// Kind is KindOpenAI or KindAnthropic.
	Kind string `json:"kind"`
	// BaseURL is the API root, e.g. https://api.openai.com/v1 or
	// https://api.anthropic.com/v1.
	BaseURL string `json:"base_url"`
	// APIKeyEnv names the environment variable holding the key;
	// APIKeyFile is a file holding it (surrounding space trimmed). At
	// most one; neither: no key is sent (a local server).
	APIKeyEnv  string `json:"api_key_env,omitempty"`
	APIKeyFile string `json:"api_key_file,omitempty"`
	// Models maps the model names requests use to the upstream's names;
	// a request's model is served by the first upstream that maps it,
	// else by the first with Default set (under its own name).
	Models  map[string]string `json:"models,omitempty"`
	Default bool              `json:"default,omitempty"`
	// TimeoutSeconds bounds the wait for the upstream's answer to start
	// and each silence between its streamed events (0: 60 s).
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
}

// Timeout is the upstream's timeout.
func (u Upstream) Timeout() time.Duration {
	if u.TimeoutSeconds <= 0 {
		return DefaultTimeout
	}
	return time.Duration(u.TimeoutSeconds) * time.Second
}

// ConfigError is an invalid configuration: Field names what is wrong.
type ConfigError struct {
	Field string // e.g. "upstreams[1].base_url"
	Msg   string
}

func (e *ConfigError) Error() string { return e.Field + ": " + e.Msg }

var upstreamName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

var configFields = []string{"upstreams"}

var upstreamFields = []string{"name", "kind", "base_url", "api_key_env", "api_key_file", "models", "default", "timeout_seconds"}

// secretFields are keys a document must not carry: a key is named by
// where it is read, never stored (the settings are replicated, backed up
// and shown by the admin API).
var secretFields = []string{"api_key", "key", "token", "authorization", "secret"}

// Parse decodes and validates a configuration document.
func Parse(doc []byte) (Config, error) {
	var c Config
	if len(doc) > MaxConfigBytes {
		return c, &ConfigError{Field: "body", Msg: fmt.Sprintf("%d bytes; at most %d", len(doc), MaxConfigBytes)}
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil || top == nil {
		return c, &ConfigError{Field: "body", Msg: "must be a JSON object with \"upstreams\""}
	}
	for k := range top {
		if !slices.Contains(configFields, k) {
			return c, &ConfigError{Field: k, Msg: "unknown field"}
		}
	}
	var ups []map[string]json.RawMessage
	if err := json.Unmarshal(top["upstreams"], &ups); err != nil {
		return c, &ConfigError{Field: "upstreams", Msg: "must be an array of objects"}
	}
	for i, u := range ups {
		for k := range u {
			f := fmt.Sprintf("upstreams[%d].%s", i, k)
			if slices.Contains(secretFields, k) {
				return c, &ConfigError{Field: f, Msg: "API keys are never stored in the settings; name the environment variable (api_key_env) or the file (api_key_file) that holds it"}
			}
			if !slices.Contains(upstreamFields, k) {
				return c, &ConfigError{Field: f, Msg: "unknown field"}
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	if err := dec.Decode(&c); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return c, &ConfigError{Field: te.Field, Msg: "wrong type: " + te.Value}
		}
		return c, &ConfigError{Field: "body", Msg: err.Error()}
	}
	return c, c.Validate()
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if len(c.Upstreams) > MaxUpstreams {
		return &ConfigError{Field: "upstreams", Msg: fmt.Sprintf("%d upstreams; at most %d", len(c.Upstreams), MaxUpstreams)}
	}
	seen := map[string]bool{}
	for i, u := range c.Upstreams {
		f := func(name string) string { return fmt.Sprintf("upstreams[%d].%s", i, name) }
		switch {
		case len(u.Name) > MaxNameLen || !upstreamName.MatchString(u.Name):
			return &ConfigError{Field: f("name"), Msg: fmt.Sprintf("%q: 1-%d letters, digits, '_', '.', '-'", u.Name, MaxNameLen)}
		case seen[u.Name]:
			return &ConfigError{Field: f("name"), Msg: fmt.Sprintf("%q is the name of another upstream", u.Name)}
		case u.Kind != KindOpenAI && u.Kind != KindAnthropic:
			return &ConfigError{Field: f("kind"), Msg: fmt.Sprintf("%q is not %q or %q", u.Kind, KindOpenAI, KindAnthropic)}
		case u.APIKeyEnv != "" && u.APIKeyFile != "":
			return &ConfigError{Field: f("api_key_env"), Msg: "give api_key_env or api_key_file, not both"}
		case u.TimeoutSeconds < 0 || u.TimeoutSeconds > MaxTimeoutSeconds:
			return &ConfigError{Field: f("timeout_seconds"), Msg: fmt.Sprintf("%d must be between 1 and %d (0: %v)", u.TimeoutSeconds, MaxTimeoutSeconds, DefaultTimeout)}
		case len(u.Models) > MaxModels:
			return &ConfigError{Field: f("models"), Msg: fmt.Sprintf("%d mappings; at most %d", len(u.Models), MaxModels)}
		case !u.Default && len(u.Models) == 0:
			return &ConfigError{Field: f("models"), Msg: "map at least one model, or set default"}
		}
		seen[u.Name] = true
		p, err := url.Parse(u.BaseURL)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.User != nil || p.RawQuery != "" || p.Fragment != "" {
			return &ConfigError{Field: f("base_url"), Msg: fmt.Sprintf("%q is not an http(s) URL without credentials, query or fragment", u.BaseURL)}
		}
		if u.APIKeyEnv != "" && strings.ContainsAny(u.APIKeyEnv, "= \x00") {
			return &ConfigError{Field: f("api_key_env"), Msg: fmt.Sprintf("%q is not an environment variable name", u.APIKeyEnv)}
		}
		for from, to := range u.Models {
			if from == "" || to == "" || strings.ContainsAny(from+to, "\x00\n") {
				return &ConfigError{Field: f("models"), Msg: fmt.Sprintf("%q → %q: names must be non-empty", from, to)}
			}
		}
	}
	return nil
}

// Route is where a model's cloud requests go.
type Route struct {
	Upstream Upstream
	Model    string // the upstream's name of the model
}

// Route finds the upstream that serves model: the first that maps it,
// else the first default one.
func (c Config) Route(model string) (Route, bool) {
	for _, u := range c.Upstreams {
		if to, ok := u.Models[model]; ok {
			return Route{Upstream: u, Model: to}, true
		}
	}
	for _, u := range c.Upstreams {
		if u.Default {
			return Route{Upstream: u, Model: model}, true
		}
	}
	return Route{}, false
}

// KeySource says where an upstream's key is read ("env:NAME",
// "file:PATH" or "none"), never the key.
func (u Upstream) KeySource() string {
	switch {
	case u.APIKeyEnv != "":
		return "env:" + u.APIKeyEnv
	case u.APIKeyFile != "":
		return "file:" + u.APIKeyFile
	}
	return "none"
}

// Secrets reads API keys; tests replace the environment.
type Secrets struct {
	Getenv   func(string) string          // nil: os.Getenv
	ReadFile func(string) ([]byte, error) // nil: os.ReadFile
}

// ErrNoKey: the key an upstream names cannot be read on this node.
var ErrNoKey = errors.New("API key not available on this node")

// Key reads u's API key ("" when u names none). The error names the
// source, never a value.
func (s Secrets) Key(u Upstream) (string, error) {
	switch {
	case u.APIKeyEnv != "":
		get := s.Getenv
		if get == nil {
			get = os.Getenv
		}
		k := strings.TrimSpace(get(u.APIKeyEnv))
		if k == "" {
			return "", fmt.Errorf("%w: environment variable %s is unset or empty", ErrNoKey, u.APIKeyEnv)
		}
		return k, nil
	case u.APIKeyFile != "":
		read := s.ReadFile
		if read == nil {
			read = os.ReadFile
		}
		b, err := read(u.APIKeyFile)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the path is already named below
			}
			return "", fmt.Errorf("%w: file %s: %v", ErrNoKey, u.APIKeyFile, err)
		}
		k := strings.TrimSpace(string(b))
		if k == "" {
			return "", fmt.Errorf("%w: file %s is empty", ErrNoKey, u.APIKeyFile)
		}
		return k, nil
	}
	return "", nil
}
