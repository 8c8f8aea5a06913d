package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"fusion/deploy"
)

// serviceConfig writes a serve config file and returns its path and the
// data directory it names.
func serviceConfig(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "fusion.json")
	if err := os.WriteFile(cfg, []byte(`{"data_dir": "`+data+`", "listen": "0.0.0.0:8000", "api_key": "k", "drain_timeout": "45s"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, data
}

// TestServiceInstall writes the definitions where each platform and scope
// wants them and runs the service manager's commands (recorded: no
// systemd or launchd runs here), then uninstalls.
func TestServiceInstall(t *testing.T) {
	cfg, data := serviceConfig(t)
	for _, tc := range []struct {
		goos    string
		path    string
		install [][]string
		remove  [][]string
	}{
		{"linux", ".config/systemd/user/fusion.service",
			[][]string{{"systemctl", "--user", "daemon-reload"}, {"systemctl", "--user", "enable", "fusion.service", "--now"}},
			[][]string{{"systemctl", "--user", "disable", "fusion.service", "--now"}, {"systemctl", "--user", "daemon-reload"}}},
		{"darwin", "Library/LaunchAgents/com.fusion.node.plist",
			[][]string{{"launchctl", "bootstrap", "gui/501", "HOME/Library/LaunchAgents/com.fusion.node.plist"}},
			[][]string{{"launchctl", "bootout", "gui/501/com.fusion.node"}}},
	} {
		home := t.TempDir()
		var ran [][]string
		h := serviceHost{goos: tc.goos, home: home, uid: 501, stdout: &strings.Builder{},
			exec: func(name string, args ...string) error {
				ran = append(ran, append([]string{name}, args...))
				return nil
			}}
		sf := &serviceFlags{host: h, config: cfg, binary: "/usr/local/bin/fusion", env: []string{"FUSION_MLXC=/opt/mlxc"}}
		if err := sf.install(); err != nil {
			t.Fatalf("%s: %v", tc.goos, err)
		}
		def, err := os.ReadFile(filepath.Join(home, tc.path))
		if err != nil {
			t.Fatalf("%s: %v", tc.goos, err)
		}
		want := deploy.Service{Binary: "/usr/local/bin/fusion", ConfigFile: cfg, DataDir: data, Env: sf.env,
			Drain: 45e9, LogDir: filepath.Join(home, "Library/Logs/fusion")}
		render := deploy.Systemd
		if tc.goos == "darwin" {
			render = deploy.Launchd
		}
		if exp, _ := render(want); string(def) != string(exp) {
			t.Errorf("%s: wrote\n%s\nwant\n%s", tc.goos, def, exp)
		}
		for _, c := range tc.install {
			for i := range c {
				c[i] = strings.ReplaceAll(c[i], "HOME", home)
			}
		}
		if !reflect.DeepEqual(ran, tc.install) {
			t.Errorf("%s install ran %v, want %v", tc.goos, ran, tc.install)
		}
		ran = nil
		if err := h.uninstall(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(home, tc.path)); !os.IsNotExist(err) {
			t.Errorf("%s: the definition is still there: %v", tc.goos, err)
		}
		if !reflect.DeepEqual(ran, tc.remove) {
			t.Errorf("%s uninstall ran %v, want %v", tc.goos, ran, tc.remove)
		}
		if err := h.uninstall(); err == nil || !strings.Contains(err.Error(), "not installed") {
			t.Errorf("%s: second uninstall: %v", tc.goos, err)
		}
	}
}

// TestServiceDryRun: a system install on Linux prints the unit, the
// account it creates and the commands, and touches nothing.
func TestServiceDryRun(t *testing.T) {
	cfg, data := serviceConfig(t)
	out := fusion(t, "service", "install", "--system", "--dry-run", "--config", cfg, "--binary", "/usr/local/bin/fusion", "--service-user", "fusion-test-nobody")
	for _, w := range []string{
		"would write /etc/systemd/system/fusion.service:\n",
		"User=fusion-test-nobody\n", "ReadWritePaths=" + data + "\n", "TimeoutStopSec=75\n",
		"would run: useradd --system --home-dir " + data + " --shell /usr/sbin/nologin fusion-test-nobody\n",
		"would run: systemctl daemon-reload\n", "would run: systemctl enable fusion.service --now\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("no %q in\n%s", w, out)
		}
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Error("a dry run created the data directory")
	}
	if strings.Contains(out, `"k"`) || strings.Contains(out, "api_key") {
		t.Error("the dry run printed the config's API key")
	}
}

func TestServiceErrors(t *testing.T) {
	cfg, _ := serviceConfig(t)
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"listne": "x"}`), 0o600)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"service", "install", "--user", "--dry-run"}, 2, "--config is required"},
		{[]string{"service", "install", "--user", "--system", "--config", cfg}, 2, "exclude each other"},
		{[]string{"service", "install", "--user", "--dry-run", "--config", bad}, 1, `unknown key "listne"`},
		{[]string{"service", "install", "--user", "--dry-run", "--config", cfg, "--env", "NOEQUALS"}, 1, "NAME=value"},
		{[]string{"service", "frob"}, 2, "unknown command"},
	} {
		var out, errb strings.Builder
		if code := run(t.Context(), tc.args, &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d: %s, want %d %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
	if _, err := (serviceHost{goos: "windows"}).definitionPath(); err == nil || !strings.Contains(err.Error(), "not on windows") {
		t.Errorf("windows: %v", err)
	}
}

// TestServiceUnderSystemd installs, starts and stops the unit under the
// machine's systemd when one runs as PID 1 (not in this container: the
// skip says so).
func TestServiceUnderSystemd(t *testing.T) {
	comm, _ := os.ReadFile("/proc/1/comm")
	if strings.TrimSpace(string(comm)) != "systemd" {
		t.Skipf("PID 1 is %q, not systemd: the installed unit is verified (systemd-analyze) but not run", strings.TrimSpace(string(comm)))
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: a system unit cannot be installed")
	}
	cfg, _ := serviceConfig(t)
	bin := filepath.Join(t.TempDir(), "fusion")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	fusion(t, "service", "install", "--system", "--config", cfg, "--binary", bin, "--service-user", "root")
	t.Cleanup(func() { fusion(t, "service", "uninstall", "--system") })
	out, err := exec.Command("systemctl", "show", "-p", "ActiveState", "fusion.service").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ActiveState=active" {
		t.Fatalf("after install: %s %v", out, err)
	}
}
