// Package deploy holds what installs fusion as a service: one template per
// platform (a systemd unit for Linux, a launchd property list for macOS),
// embedded in the binary so `fusion service install` writes them, and the
// container and Homebrew definitions beside them. The templates take a
// Service and nothing else; what the node does lives in its config file.
package deploy

import (
	"bytes"
	"embed"
	"encoding/xml"
	"fmt"
	"path"
	"slices"
	"strings"
	"text/template"
	"time"
)

//go:embed systemd/fusion.service.tmpl launchd/fusion.plist.tmpl
var templates embed.FS

// Service describes one installed node.
type Service struct {
	Binary     string // absolute path of the fusion binary
	ConfigFile string // absolute path of the serve config (JSON)
	DataDir    string // the node's data directory (writable by the unit)
	LogDir     string // launchd: where stdout and stderr go
	Label      string // launchd label (default DefaultLabel)
	// System installs for the machine (a systemd system unit run as User
	// with the hardening options; a launchd daemon) rather than for the
	// user who runs the command.
	System bool
	User   string // the dedicated account of a system service
	// Env is passed to the node (NAME=value), sorted.
	Env []string
	// Drain is the node's drain timeout; the service manager waits that
	// plus a margin before killing it.
	Drain time.Duration
	// Watchdog is systemd's WatchdogSec (default 60s).
	Watchdog time.Duration
}

// DefaultLabel is the launchd label and the base name of the files.
const DefaultLabel = "com.fusion.node"

func (s Service) check() error {
	for name, p := range map[string]string{"binary": s.Binary, "config file": s.ConfigFile, "data dir": s.DataDir} {
		if !path.IsAbs(p) {
			return fmt.Errorf("deploy: the %s must be an absolute path, not %q", name, p)
		}
		if strings.ContainsAny(p, "\n\r%") {
			return fmt.Errorf("deploy: the %s %q has a character a unit cannot carry", name, p)
		}
	}
	if s.System && s.User == "" {
		return fmt.Errorf("deploy: a system service needs a dedicated user")
	}
	for _, e := range s.Env {
		name, _, ok := strings.Cut(e, "=")
		if !ok || name == "" || strings.ContainsAny(e, "\n\r") {
			return fmt.Errorf("deploy: environment entry %q is not NAME=value on one line", e)
		}
	}
	return nil
}

type view struct {
	Service
	StopSec, WatchdogSec int
	EnvPairs             []envPair
}

type envPair struct{ Name, Value string }

func (s Service) view() view {
	if s.Label == "" {
		s.Label = DefaultLabel
	}
	if s.Watchdog <= 0 {
		s.Watchdog = 60 * time.Second
	}
	env := slices.Sorted(slices.Values(s.Env))
	s.Env = env
	v := view{Service: s, StopSec: int((s.Drain + 30*time.Second).Seconds()), WatchdogSec: int(s.Watchdog.Seconds())}
	for _, e := range env {
		n, val, _ := strings.Cut(e, "=")
		v.EnvPairs = append(v.EnvPairs, envPair{n, val})
	}
	return v
}

var funcs = template.FuncMap{
	// quote makes a systemd word: double quotes around anything with a
	// space, quote or backslash, those escaped; $ doubled so systemd does
	// not expand it.
	"quote": func(s string) string {
		s = strings.ReplaceAll(s, "$", "$$")
		if !strings.ContainsAny(s, " \t\"'\\") {
			return s
		}
		r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
		return `"` + r.Replace(s) + `"`
	},
	"xml": func(s string) (string, error) {
		var b bytes.Buffer
		err := xml.EscapeText(&b, []byte(s))
		return b.String(), err
	},
}

func render(name string, s Service) ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	t, err := template.New(path.Base(name)).Funcs(funcs).Option("missingkey=error").ParseFS(templates, name)
	if err != nil {
		return nil, fmt.Errorf("deploy: %w", err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, s.view()); err != nil {
		return nil, fmt.Errorf("deploy: %w", err)
	}
	return b.Bytes(), nil
}

// Systemd renders the systemd unit.
func Systemd(s Service) ([]byte, error) { return render("systemd/fusion.service.tmpl", s) }

// Launchd renders the launchd property list.
func Launchd(s Service) ([]byte, error) { return render("launchd/fusion.plist.tmpl", s) }
