package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"howett.net/plist"
)

func service(t *testing.T, system bool) Service {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "my config.json") // a space: quoting is exercised
	if err := os.WriteFile(cfg, []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return Service{
		Binary: bin, ConfigFile: cfg, DataDir: filepath.Join(dir, "data"), LogDir: filepath.Join(dir, "logs"),
		System: system, User: "root", Drain: 30 * time.Second,
		Env: []string{"FUSION_MLXC=/opt/mlx <&> lib", "A=1"},
	}
}

// TestSystemdUnit: the unit passes `systemd-analyze verify` and carries
// what the service needs (notify readiness, watchdog, restart on failure,
// the config file, hardening for a system unit).
func TestSystemdUnit(t *testing.T) {
	for _, system := range []bool{true, false} {
		s := service(t, system)
		unit, err := Systemd(s)
		if err != nil {
			t.Fatal(err)
		}
		text := string(unit)
		want := []string{
			"Type=notify", "Restart=on-failure", "WatchdogSec=60", "TimeoutStopSec=60", "ExecReload=/bin/kill -HUP $MAINPID",
			`ExecStart=` + s.Binary + ` serve --config "` + s.ConfigFile + `"`,
			`Environment="FUSION_MLXC=/opt/mlx <&> lib"`, "Environment=A=1", "NoNewPrivileges=yes", "PrivateTmp=yes",
		}
		if system {
			want = append(want, "User=root", "ProtectSystem=strict", `ReadWritePaths=`+s.DataDir, "WantedBy=multi-user.target")
		} else {
			want = append(want, "WantedBy=default.target")
			if strings.Contains(text, "User=") || strings.Contains(text, "ProtectSystem") {
				t.Error("a user unit names a user or protects the system (systemd --user refuses both)")
			}
		}
		for _, w := range want {
			if !strings.Contains(text, w+"\n") {
				t.Errorf("system=%v: no line %q in\n%s", system, w, text)
			}
		}
		if strings.Index(text, "Environment=A=1") > strings.Index(text, "Environment=\"FUSION") {
			t.Error("environment not sorted")
		}
		verify(t, unit)
	}
}

func verify(t *testing.T, unit []byte) {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("FUSION_REQUIRE_FIXTURES") != "" {
			t.Fatal("systemd-analyze is missing (apt install systemd)")
		}
		t.Skip("systemd-analyze not installed: the unit is not verified")
	}
	f := filepath.Join(t.TempDir(), "fusion.service")
	if err := os.WriteFile(f, unit, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", "--man=no", f).CombinedOutput()
	// verify also reports on units it pulls in from the machine
	// (network-online.target); only lines about ours count.
	var ours []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "fusion.service") {
			ours = append(ours, l)
		}
	}
	if len(ours) > 0 || (err != nil && len(strings.TrimSpace(string(out))) == 0) {
		t.Errorf("systemd-analyze verify: %v\n%s\n%s", err, out, unit)
	}
}

// TestLaunchdPlist: the property list parses back (a plist decoder, as
// plutil -lint would) to the values put in, special characters included.
func TestLaunchdPlist(t *testing.T) {
	for _, system := range []bool{true, false} {
		s := service(t, system)
		data, err := Launchd(s)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Label             string
			ProgramArguments  []string
			RunAtLoad         bool
			KeepAlive         map[string]bool
			ThrottleInterval  int
			ExitTimeOut       int
			StandardOutPath   string
			StandardErrorPath string
			EnvironmentVars   map[string]string `plist:"EnvironmentVariables"`
			UserName          string
		}
		format, err := plist.Unmarshal(data, &got)
		if err != nil || format != plist.XMLFormat {
			t.Fatalf("parse (format %d): %v\n%s", format, err, data)
		}
		want := []string{s.Binary, "serve", "--config", s.ConfigFile}
		if got.Label != DefaultLabel || !reflect.DeepEqual(got.ProgramArguments, want) || !got.RunAtLoad ||
			got.KeepAlive["SuccessfulExit"] || len(got.KeepAlive) != 1 || got.ThrottleInterval != 10 || got.ExitTimeOut != 60 ||
			got.StandardErrorPath != filepath.Join(s.LogDir, "fusion.err.log") {
			t.Errorf("system=%v: %+v", system, got)
		}
		if !reflect.DeepEqual(got.EnvironmentVars, map[string]string{"FUSION_MLXC": "/opt/mlx <&> lib", "A": "1"}) {
			t.Errorf("environment: %v", got.EnvironmentVars)
		}
		if (got.UserName == "root") != system {
			t.Errorf("system=%v: UserName %q", system, got.UserName)
		}
	}
}

func TestServiceChecks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Service)
		want   string
	}{
		{"relative binary", func(s *Service) { s.Binary = "fusion" }, "absolute path"},
		{"relative config", func(s *Service) { s.ConfigFile = "c.json" }, "absolute path"},
		{"newline in a path", func(s *Service) { s.DataDir = "/a\nExecStartPre=/bin/sh" }, "cannot carry"},
		{"system without a user", func(s *Service) { s.System, s.User = true, "" }, "dedicated user"},
		{"env without =", func(s *Service) { s.Env = []string{"A"} }, "NAME=value"},
		{"env with a newline", func(s *Service) { s.Env = []string{"A=1\nB=2"} }, "NAME=value"},
	} {
		s := service(t, false)
		tc.change(&s)
		for _, render := range []func(Service) ([]byte, error){Systemd, Launchd} {
			if _, err := render(s); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
			}
		}
	}
}

// TestDockerfile builds the image when a container engine answers here
// (the skip says so otherwise) and checks the definition's promises: a
// non-root user, a health check through the binary, SIGTERM to drain.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, w := range []string{"\nUSER 10001:10001\n", `CMD ["/usr/local/bin/fusion", "health", "-q"`, "\nSTOPSIGNAL SIGTERM\n", `ENTRYPOINT ["/usr/local/bin/fusion", "serve"]`} {
		if !strings.Contains(text, w) {
			t.Errorf("Dockerfile lacks %q", w)
		}
	}
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Skip("no docker here: the image is not built")
	}
	if out, err := exec.Command(docker, "info").CombinedOutput(); err != nil {
		t.Skipf("docker does not answer (%v): the image is not built: %s", err, firstLine(string(out)))
	}
	out, err := exec.Command(docker, "build", "-f", "Dockerfile", "-t", "fusion-test", "..").CombinedOutput()
	if err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "Cannot connect") || strings.Contains(l, "ERROR") {
			return strings.TrimSpace(l)
		}
	}
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}
