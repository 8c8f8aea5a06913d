package deploy

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"fusion/engine/backend/mlx"
)

// formula is what deploy/homebrew/testdata/dsl.rb prints of the formula.
type formula struct {
	DependsOn []string   `json:"depends_on"`
	System    [][]string `json:"system"`
	Desc      string     `json:"desc"`
	Head      struct{ URL, Using string }
	Service   struct {
		Run        []string          `json:"run"`
		WorkingDir string            `json:"working_dir"`
		Env        map[string]string `json:"environment_variables"`
		Unknown    []string          `json:"unknown"`
	} `json:"service"`
	Caveats string `json:"caveats"`
	Config  string `json:"config"`
}

// TestHomebrewFormula: deploy/homebrew/fusion.rb is valid Ruby (ruby -c),
// and, loaded by a stand-in for Homebrew's DSL, its install command
// really builds fusion from this tree with the version stamped where
// `fusion version` reads it; its service runs that binary with its
// config file and environment until SIGTERM; its caveats name the
// library variable and make target that exist. Ruby comes from apt
// (scripts/test-deps.sh); without it the test skips, or fails under
// FUSION_REQUIRE_FIXTURES=1.
func TestHomebrewFormula(t *testing.T) {
	ruby, err := exec.LookPath("ruby")
	if err != nil {
		if os.Getenv("FUSION_REQUIRE_FIXTURES") == "1" {
			t.Fatal("ruby not installed (scripts/test-deps.sh installs it)")
		}
		t.Skip("ruby not installed")
	}
	path := filepath.Join("homebrew", "fusion.rb")
	if out, err := exec.Command(ruby, "-c", path).CombinedOutput(); err != nil || !strings.Contains(string(out), "Syntax OK") {
		t.Fatalf("ruby -c: %v: %s", err, out)
	}
	prefix := t.TempDir()
	cmd := exec.Command(ruby, filepath.Join("homebrew", "testdata", "dsl.rb"), path)
	cmd.Env = append(os.Environ(), "PREFIX="+prefix)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("loading the formula: %v", err)
	}
	var f formula
	if err := json.Unmarshal(out, &f); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if f.Desc == "" || f.Head.Using != "git" || !slices.Contains(f.DependsOn, "go:build") || len(f.Service.Unknown) > 0 {
		t.Errorf("declarations: %+v", f)
	}
	for _, want := range []string{mlx.EnvLibrary, "make build-mlx", "libmlxc"} {
		if !strings.Contains(f.Caveats, want) {
			t.Errorf("caveats do not mention %q", want)
		}
	}
	if mk, err := os.ReadFile(filepath.Join("..", "Makefile")); err != nil || !strings.Contains(string(mk), "\nbuild-mlx:") {
		t.Errorf("the caveats' make build-mlx is not a Makefile target (%v)", err)
	}

	// The install: one go build, run from the source root as Homebrew does.
	if len(f.System) != 1 || len(f.System[0]) < 2 || f.System[0][0] != "go" || f.System[0][1] != "build" {
		t.Fatalf("install commands: %v", f.System)
	}
	build := exec.Command(f.System[0][0], f.System[0][1:]...)
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", f.System[0], err, out)
	}
	bin := filepath.Join(prefix, "bin", "fusion")
	if out, err := exec.Command(bin, "version").Output(); err != nil || strings.TrimSpace(string(out)) != "fusion HEAD-test" {
		t.Errorf("fusion version of the formula's build: %q %v", out, err)
	}

	// The service: its command line (opt_bin is the installed bin), its
	// environment and working directory, and the config post_install
	// wrote (its port swapped for a free one by a flag, which wins over
	// the file).
	run := f.Service.Run
	if len(run) < 4 || filepath.Base(run[0]) != "fusion" || run[1] != "serve" || run[2] != "--config" {
		t.Fatalf("service run: %v", run)
	}
	if _, err := os.Stat(run[3]); err != nil {
		t.Fatalf("the service's config: %v", err)
	}
	if err := os.MkdirAll(f.Service.WorkingDir, 0o755); err != nil {
		t.Fatal(err)
	}
	svc := exec.Command(bin, append(run[1:], "--listen", "127.0.0.1:0")...)
	svc.Dir = f.Service.WorkingDir
	svc.Env = os.Environ()
	for k, v := range f.Service.Env {
		svc.Env = append(svc.Env, k+"="+v)
	}
	stderr, err := svc.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	defer svc.Process.Kill()
	serving := make(chan map[string]any, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == "node serving" {
				serving <- line
			}
		}
	}()
	select {
	case line := <-serving:
		if dd, _ := line["models_dir"].(string); !strings.HasPrefix(dd, filepath.Join(prefix, "var", "fusion")) {
			t.Errorf("the service's node does not use the config's data dir: %v", line)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the service's node did not log \"node serving\" as JSON")
	}
	svc.Process.Signal(syscall.SIGTERM)
	if err := svc.Wait(); err != nil {
		t.Errorf("service exit after SIGTERM: %v", err)
	}
}
