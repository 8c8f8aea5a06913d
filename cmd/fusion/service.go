package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"fusion/deploy"
	"fusion/internal/atomicfile"
)

const serviceUsage = `usage: fusion service install|uninstall|status [flags]

Installs fusion as a service that starts at boot and restarts on failure:
a systemd unit on Linux (Type=notify with a watchdog, hardening options and
a dedicated user for a system unit), a launchd daemon or agent on macOS.
The node's settings come from --config (the JSON file fusion serve
--config reads); the service definitions are the templates in deploy/.
--system (the default for root) installs for the machine, --user for the
user running the command. --dry-run prints what would be written and run.
`

func serviceCommands() map[string]command {
	return map[string]command{
		"install":   {summary: "install and start fusion as a service (fusion service install -h)", run: runServiceInstall},
		"uninstall": {summary: "stop and remove the service", run: runServiceUninstall},
		"status":    {summary: "print the service manager's view of the service", run: runServiceStatus},
	}
}

// serviceHost is where a service is installed: the platform, the scope and
// how commands run (printed only, in a dry run).
type serviceHost struct {
	goos   string
	system bool
	home   string
	uid    int
	dryRun bool
	stdout io.Writer
	exec   func(name string, args ...string) error
}

type serviceFlags struct {
	host           serviceHost
	config, binary string
	serviceUser    string
	env            []string
}

func parseServiceFlags(name string, args []string, stdout, stderr io.Writer, install bool) (*serviceFlags, error) {
	fs := newFlagSet("service "+name, stderr)
	fs.Usage = func() { fmt.Fprint(stderr, serviceUsage); fs.PrintDefaults() }
	sf := &serviceFlags{}
	userScope := fs.Bool("user", false, "install for the current user (systemd --user, a LaunchAgent)")
	systemScope := fs.Bool("system", false, "install for the machine (a system unit, a LaunchDaemon; the default for root)")
	dry := fs.Bool("dry-run", false, "print what would be written and run, do nothing")
	if install {
		fs.StringVar(&sf.config, "config", "", "the node's JSON config file (required)")
		fs.StringVar(&sf.binary, "binary", "", "the fusion binary the service runs (default: this one)")
		fs.StringVar(&sf.serviceUser, "service-user", "fusion", "the dedicated account a system service runs as (created on Linux when missing)")
		fs.Func("env", "NAME=value passed to the node (repeatable), e.g. FUSION_MLXC=/opt/mlxc", func(v string) error {
			sf.env = append(sf.env, v)
			return nil
		})
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if *userScope && *systemScope {
		return nil, usagef("--user and --system exclude each other")
	}
	home, _ := os.UserHomeDir()
	sf.host = serviceHost{
		goos: runtime.GOOS, system: *systemScope || (!*userScope && os.Geteuid() == 0),
		home: home, uid: os.Geteuid(), dryRun: *dry, stdout: stdout,
		exec: func(name string, args ...string) error {
			cmd := exec.Command(name, args...)
			cmd.Stdout, cmd.Stderr = stdout, stderr
			return cmd.Run()
		},
	}
	return sf, nil
}

// definitionPath is where the unit or property list goes.
func (h serviceHost) definitionPath() (string, error) {
	switch {
	case h.goos == "linux" && h.system:
		return "/etc/systemd/system/fusion.service", nil
	case h.goos == "linux":
		return filepath.Join(h.home, ".config/systemd/user/fusion.service"), nil
	case h.goos == "darwin" && h.system:
		return "/Library/LaunchDaemons/" + deploy.DefaultLabel + ".plist", nil
	case h.goos == "darwin":
		return filepath.Join(h.home, "Library/LaunchAgents", deploy.DefaultLabel+".plist"), nil
	}
	return "", fmt.Errorf("services are installed on Linux (systemd) and macOS (launchd), not on %s", h.goos)
}

// manager is systemctl or launchctl with the scope's arguments.
func (h serviceHost) manager(verb string, def string) (string, []string) {
	if h.goos == "linux" {
		args := []string{verb}
		if !h.system {
			args = []string{"--user", verb}
		}
		if verb != "daemon-reload" {
			args = append(args, "fusion.service")
		}
		if verb == "enable" || verb == "disable" {
			args = append(args, "--now")
		}
		return "systemctl", args
	}
	domain := "gui/" + strconv.Itoa(h.uid)
	if h.system {
		domain = "system"
	}
	switch verb {
	case "enable":
		return "launchctl", []string{"bootstrap", domain, def}
	case "disable":
		return "launchctl", []string{"bootout", domain + "/" + deploy.DefaultLabel}
	default: // status
		return "launchctl", []string{"print", domain + "/" + deploy.DefaultLabel}
	}
}

func (h serviceHost) manage(verb, def string) error {
	name, args := h.manager(verb, def)
	return h.run(name, args...)
}

func (h serviceHost) run(name string, args ...string) error {
	if h.dryRun {
		fmt.Fprintf(h.stdout, "would run: %s %s\n", name, strings.Join(args, " "))
		return nil
	}
	if err := h.exec(name, args...); err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

func runServiceInstall(_ context.Context, args []string, stdout, stderr io.Writer) error {
	sf, err := parseServiceFlags("install", args, stdout, stderr, true)
	if err != nil {
		return err
	}
	return sf.install()
}

func (sf *serviceFlags) install() error {
	h := sf.host
	if sf.config == "" {
		return usagef("--config is required: the node's settings live there")
	}
	cfgPath, err := filepath.Abs(expandHome(sf.config))
	if err != nil {
		return err
	}
	// The service must start: check the config as fusion serve will read
	// it (the environment apart, which the service does not have).
	settings, err := resolveServe([]string{"--config", cfgPath}, func(string) string { return "" }, io.Discard)
	if err != nil {
		return fmt.Errorf("--config %s: %w", cfgPath, err)
	}
	bin := sf.binary
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return err
		}
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return err
	}
	dataDir, err := filepath.Abs(settings.cfg.DataDir)
	if err != nil {
		return err
	}
	svc := deploy.Service{
		Binary: bin, ConfigFile: cfgPath, DataDir: dataDir, System: h.system, Env: sf.env,
		Drain: settings.cfg.DrainTimeout, LogDir: filepath.Join(h.home, "Library/Logs/fusion"),
	}
	if h.system {
		svc.User = sf.serviceUser
		svc.LogDir = "/Library/Logs/fusion"
	}
	path, err := h.definitionPath()
	if err != nil {
		return err
	}
	var def []byte
	if h.goos == "linux" {
		def, err = deploy.Systemd(svc)
	} else {
		def, err = deploy.Launchd(svc)
	}
	if err != nil {
		return err
	}
	if h.system {
		if err := h.ensureUser(svc.User, dataDir); err != nil {
			return err
		}
	}
	if h.dryRun {
		fmt.Fprintf(h.stdout, "would write %s:\n%s", path, def)
	} else {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if h.goos == "darwin" {
			if err := os.MkdirAll(svc.LogDir, 0o755); err != nil {
				return err
			}
		}
		if err := atomicfile.WriteMode(path, 0o644, func(w io.Writer) error { _, err := w.Write(def); return err }); err != nil {
			return err
		}
		fmt.Fprintf(h.stdout, "wrote %s\n", path)
	}
	if h.goos == "linux" {
		if err := h.manage("daemon-reload", path); err != nil {
			return err
		}
	}
	return h.manage("enable", path)
}

// ensureUser creates the dedicated account of a system service on Linux
// when it is missing and gives it the data directory; on macOS it says how
// (accounts there are made with sysadminctl or dscl, by the operator).
func (h serviceHost) ensureUser(name, dataDir string) error {
	if _, err := user.Lookup(name); err == nil {
		if h.dryRun {
			fmt.Fprintf(h.stdout, "would give %s to user %s\n", dataDir, name)
			return nil
		}
		return chownTree(name, dataDir)
	} else if !errors.As(err, new(user.UnknownUserError)) {
		return err
	}
	if h.goos != "linux" {
		return fmt.Errorf("no user %q: create it (sudo sysadminctl -addUser %s -roleAccount) or pass --service-user", name, name)
	}
	if err := h.run("useradd", "--system", "--home-dir", dataDir, "--shell", "/usr/sbin/nologin", name); err != nil {
		return err
	}
	if h.dryRun {
		fmt.Fprintf(h.stdout, "would give %s to user %s\n", dataDir, name)
		return nil
	}
	return chownTree(name, dataDir)
}

func chownTree(name, dir string) error {
	u, err := user.Lookup(name)
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

func runServiceUninstall(_ context.Context, args []string, stdout, stderr io.Writer) error {
	sf, err := parseServiceFlags("uninstall", args, stdout, stderr, false)
	if err != nil {
		return err
	}
	return sf.host.uninstall()
}

func (h serviceHost) uninstall() error {
	path, err := h.definitionPath()
	if err != nil {
		return err
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && !h.dryRun {
		return fmt.Errorf("not installed: no %s", path)
	}
	if err := h.manage("disable", path); err != nil {
		return err
	}
	if h.dryRun {
		fmt.Fprintf(h.stdout, "would remove %s\n", path)
		return nil
	}
	if err := os.Remove(path); err != nil {
		return err
	}
	fmt.Fprintf(h.stdout, "removed %s\n", path)
	if h.goos == "linux" {
		return h.manage("daemon-reload", path)
	}
	return nil
}

func runServiceStatus(_ context.Context, args []string, stdout, stderr io.Writer) error {
	sf, err := parseServiceFlags("status", args, stdout, stderr, false)
	if err != nil {
		return err
	}
	path, err := sf.host.definitionPath()
	if err != nil {
		return err
	}
	return sf.host.manage("status", path)
}
