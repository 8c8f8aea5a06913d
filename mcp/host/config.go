package host

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Transports a server can be reached by.
const (
	TransportStdio = "stdio" // a child process speaking over stdin/stdout
	TransportHTTP  = "http"  // MCP's streamable HTTP transport
	TransportSSE   = "sse"   // the older HTTP+SSE transport
)

// ServerConfig is one entry of the "mcpServers" object, in Claude
// Desktop's format: a command (stdio) or a URL (HTTP). Env and Headers
// hold secrets: they are never logged or reported (LogValue and String
// leave them out).
type ServerConfig struct {
	Name    string            `json:"-"`
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// Type picks an HTTP transport: "http" (also "streamable-http" or
	// "streamableHttp", the default for a URL) or "sse". A command is
	// always stdio.
	Type string `json:"type,omitempty"`
	// Nodes, when set, names the cluster nodes that run the server (an
	// extension of the format); the others list it with these nodes and
	// send its calls to one of them. Empty: every node runs it.
	Nodes []string `json:"nodes,omitempty"`

	// written is the entry before ${NAME} was replaced (nil: as is).
	written *ServerConfig
}

// RunsOn reports whether the node with this id runs the server.
func (c ServerConfig) RunsOn(node string) bool {
	return len(c.Nodes) == 0 || slices.Contains(c.Nodes, node)
}

// Transport is the transport the entry uses.
func (c ServerConfig) Transport() string {
	if c.Command != "" {
		return TransportStdio
	}
	if c.Type == TransportSSE {
		return TransportSSE
	}
	return TransportHTTP
}

// String names the server and its transport, nothing secret.
func (c ServerConfig) String() string { return c.Name + " (" + c.Transport() + ")" }

// LogValue keeps a logged ServerConfig to its name and transport.
func (c ServerConfig) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", c.Name), slog.String("transport", c.Transport()))
}

// Config is a set of MCP servers by name.
type Config struct {
	Servers []ServerConfig // sorted by name
}

// ConfigError is a configuration the host cannot use.
type ConfigError struct {
	Path string // "" when parsed from bytes
	// Server and Field name the entry and the field at fault, when one is
	// ("fs", "mcpServers.fs.command"); Field is "" for the document.
	Server, Field string
	Msg           string
}

func (e *ConfigError) Error() string {
	if e.Path == "" {
		return "mcp config: " + e.Msg
	}
	return "mcp config " + e.Path + ": " + e.Msg
}

// LoadConfig reads a Claude Desktop style file; getenv resolves ${NAME}.
func LoadConfig(path string, getenv func(string) string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("mcp config: %w", err)
	}
	cfg, err := ParseConfig(data, getenv)
	var ce *ConfigError
	if errors.As(err, &ce) {
		ce.Path = path
	}
	return cfg, err
}

// serverNameRE is what a server name may be: it becomes part of tool names
// (server__tool), so no spaces or separators that would read ambiguously.
var serverNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ParseConfig parses {"mcpServers": {"name": {...}}}. Every string of an
// entry may hold ${NAME}, replaced by getenv(NAME); a variable that is not
// set is an error naming it (an empty secret is almost always a mistake).
// Unknown fields are refused so a typo does not silently drop a setting.
// Each entry remembers how it was written (Written), references and all.
func ParseConfig(data []byte, getenv func(string) string) (Config, error) {
	raw, err := ParseRaw(data)
	if err != nil {
		return Config{}, err
	}
	for i, sc := range raw.Servers {
		if raw.Servers[i], err = sc.Interpolate(getenv); err != nil {
			return Config{}, err
		}
	}
	return raw, nil
}

// ParseRaw parses and checks a configuration as written, without
// replacing ${NAME}: what the admin API stores and replicates, since each
// node resolves the references from its own environment when it starts
// the server. A URL made of a reference is checked once resolved.
func ParseRaw(data []byte) (Config, error) {
	var file struct {
		MCPServers map[string]json.RawMessage `json:"mcpServers"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return Config{}, &ConfigError{Msg: err.Error()}
	}
	if file.MCPServers == nil {
		return Config{}, &ConfigError{Field: "mcpServers", Msg: `no "mcpServers" object`}
	}
	var cfg Config
	for name, raw := range file.MCPServers {
		field := "mcpServers." + name
		if !serverNameRE.MatchString(name) || strings.Contains(name, "__") {
			return Config{}, &ConfigError{Server: name, Field: field,
				Msg: fmt.Sprintf("server name %q: use letters, digits, '.', '-', '_' (no \"__\"), at most 64", name)}
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		var sc ServerConfig
		if err := dec.Decode(&sc); err != nil {
			return Config{}, &ConfigError{Server: name, Field: field + jsonField(err), Msg: fmt.Sprintf("server %q: %v", name, err)}
		}
		sc.Name = name
		if err := sc.validate(true); err != nil {
			return Config{}, sc.configError(err)
		}
		cfg.Servers = append(cfg.Servers, sc)
	}
	sort.Slice(cfg.Servers, func(i, j int) bool { return cfg.Servers[i].Name < cfg.Servers[j].Name })
	return cfg, nil
}

// jsonField is ".field" for a decoding error about one field of an entry.
func jsonField(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return "." + te.Field
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return "." + strings.Trim(name, `"`)
	}
	return ""
}

// fieldError is a problem with one field of an entry.
type fieldError struct{ field, msg string }

func (e *fieldError) Error() string { return e.msg }

func (c ServerConfig) configError(err error) *ConfigError {
	field := "mcpServers." + c.Name
	var fe *fieldError
	if errors.As(err, &fe) && fe.field != "" {
		field += "." + fe.field
	}
	return &ConfigError{Server: c.Name, Field: field, Msg: fmt.Sprintf("server %q: %v", c.Name, err)}
}

// Interpolate returns the entry with every ${NAME} replaced by
// getenv(NAME); a variable that is not set is a *ConfigError naming it
// (never a value). The result remembers the entry as written.
func (c ServerConfig) Interpolate(getenv func(string) string) (ServerConfig, error) {
	written := c.Written()
	out := written.clone()
	out.written = &written
	if err := out.interpolate(getenv); err != nil {
		return ServerConfig{}, c.configError(err)
	}
	if err := out.validate(false); err != nil {
		return ServerConfig{}, c.configError(err)
	}
	return out, nil
}

// Written is the entry as the configuration wrote it, ${NAME} references
// unresolved.
func (c ServerConfig) Written() ServerConfig {
	if c.written != nil {
		return *c.written
	}
	return c
}

// clone copies the entry's slices and maps.
func (c ServerConfig) clone() ServerConfig {
	c.Args = slices.Clone(c.Args)
	c.Nodes = slices.Clone(c.Nodes)
	c.Env = maps.Clone(c.Env)
	c.Headers = maps.Clone(c.Headers)
	c.written = nil
	return c
}

// validate checks an entry; refs allows a URL that is a ${NAME} reference
// not yet resolved.
func (c *ServerConfig) validate(refs bool) error {
	bad := func(field, msg string) error { return &fieldError{field: field, msg: msg} }
	switch {
	case c.Command != "" && c.URL != "":
		return bad("url", `give "command" or "url", not both`)
	case c.Command == "" && c.URL == "":
		return bad("command", `give "command" (stdio) or "url" (HTTP)`)
	case c.URL != "" && len(c.Args) > 0:
		return bad("args", `"args", "env" and "cwd" belong to a "command"`)
	case c.URL != "" && len(c.Env) > 0:
		return bad("env", `"args", "env" and "cwd" belong to a "command"`)
	case c.URL != "" && c.Cwd != "":
		return bad("cwd", `"args", "env" and "cwd" belong to a "command"`)
	case c.Command != "" && len(c.Headers) > 0:
		return bad("headers", `"headers" belong to a "url"`)
	}
	switch c.Type {
	case "", TransportStdio, TransportHTTP, TransportSSE:
	case "streamable-http", "streamableHttp", "streamable_http":
		c.Type = TransportHTTP
	default:
		return bad("type", fmt.Sprintf("type %q: use http or sse", c.Type))
	}
	if c.Type == TransportStdio && c.Command == "" || c.Command != "" && c.Type != "" && c.Type != TransportStdio {
		return bad("type", fmt.Sprintf("type %q does not match the entry", c.Type))
	}
	if c.URL != "" && !strings.HasPrefix(c.URL, "http://") && !strings.HasPrefix(c.URL, "https://") &&
		!(refs && strings.HasPrefix(c.URL, "${")) {
		return bad("url", `"url" must be http:// or https://`)
	}
	if c.Nodes != nil && len(c.Nodes) == 0 {
		return bad("nodes", `"nodes" is empty: name at least one node, or leave it out to run the server on every node`)
	}
	for _, n := range c.Nodes {
		if strings.TrimSpace(n) == "" {
			return bad("nodes", `"nodes" holds an empty node id`)
		}
	}
	return nil
}

var envRefRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expand replaces ${NAME} in s.
func expand(s string, getenv func(string) string) (string, error) {
	var missing string
	out := envRefRE.ReplaceAllStringFunc(s, func(ref string) string {
		name := ref[2 : len(ref)-1]
		v := getenv(name)
		if v == "" && missing == "" {
			missing = name
		}
		return v
	})
	if missing != "" {
		return "", fmt.Errorf("environment variable %s is not set", missing)
	}
	return out, nil
}

func (c *ServerConfig) interpolate(getenv func(string) string) error {
	var err error
	one := func(s *string) {
		if err == nil {
			*s, err = expand(*s, getenv)
		}
	}
	one(&c.Command)
	one(&c.Cwd)
	one(&c.URL)
	for i := range c.Args {
		one(&c.Args[i])
	}
	for _, m := range []map[string]string{c.Env, c.Headers} {
		for k, v := range m {
			one(&v)
			m[k] = v
		}
	}
	return err
}

// minSecret is the shortest env or header value redact hides: shorter
// ones ("1", "en") would blank out ordinary words of a message.
const minSecret = 4

// redact hides what may be secret in a message about the server (an
// error, a line of its stderr): the values of its env and headers, and
// its URL's query string and user info, which Go's HTTP errors quote.
func (c ServerConfig) redact(msg string) string {
	if c.URL != "" {
		if u, err := url.Parse(c.URL); err == nil && (u.RawQuery != "" || u.User != nil) {
			safe := *u
			safe.User = nil
			if safe.RawQuery != "" {
				safe.RawQuery = "REDACTED"
			}
			msg = strings.ReplaceAll(msg, c.URL, safe.String())
		}
	}
	for _, m := range []map[string]string{c.Env, c.Headers} {
		for _, v := range m {
			if len(v) >= minSecret {
				msg = strings.ReplaceAll(msg, v, "[redacted]")
			}
			// A header's credential without its scheme ("Bearer tok").
			if _, cred, ok := strings.Cut(v, " "); ok && len(cred) >= minSecret {
				msg = strings.ReplaceAll(msg, cred, "[redacted]")
			}
		}
	}
	return msg
}

// SecretMask stands for a value of an entry's env or headers wherever the
// configuration is shown (the admin API): secrets are never echoed back.
const SecretMask = "********"

// Document encodes the configuration as written (${NAME} references
// unresolved) in Claude Desktop's format; masked replaces every value of
// env and headers by SecretMask.
func (c Config) Document(masked bool) ([]byte, error) {
	servers := make(map[string]ServerConfig, len(c.Servers))
	for _, sc := range c.Servers {
		w := sc.Written().clone()
		if masked {
			for _, m := range []map[string]string{w.Env, w.Headers} {
				for k := range m {
					m[k] = SecretMask
				}
			}
		}
		servers[sc.Name] = w
	}
	return json.Marshal(map[string]any{"mcpServers": servers})
}

// KeepSecrets replaces every SecretMask value of c's env and headers by
// the value the server of the same name has under the same key in old (as
// written), so a document read with GET, edited and sent back keeps the
// secrets it never showed. A mask with no stored value behind it is a
// *ConfigError naming the field.
func (c *Config) KeepSecrets(old Config) error {
	prev := map[string]ServerConfig{}
	for _, sc := range old.Servers {
		prev[sc.Name] = sc.Written()
	}
	for i := range c.Servers {
		sc := &c.Servers[i]
		p, had := prev[sc.Name]
		for _, f := range []struct {
			name      string
			cur, prev map[string]string
		}{{"env", sc.Env, p.Env}, {"headers", sc.Headers, p.Headers}} {
			for k, v := range f.cur {
				if v != SecretMask {
					continue
				}
				pv, ok := f.prev[k]
				if !had || !ok {
					return &ConfigError{Server: sc.Name, Field: "mcpServers." + sc.Name + "." + f.name + "." + k,
						Msg: fmt.Sprintf("server %q: %s %q is the mask %s, but no value is stored for it to stand for", sc.Name, f.name, k, SecretMask)}
				}
				f.cur[k] = pv
			}
		}
	}
	return nil
}
