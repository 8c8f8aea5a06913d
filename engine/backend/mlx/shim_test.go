package mlx

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"fusion/engine/backend/mlx/internal/shimgen"
)

func parseDecls(t *testing.T) *shimgen.Decls {
	t.Helper()
	src, err := os.ReadFile("mlxc.decl")
	if err != nil {
		t.Fatal(err)
	}
	d, err := shimgen.Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestShimUpToDate fails when shim.h or shim.c is not what go generate
// makes from mlxc.decl (an edit of one without the other).
func TestShimUpToDate(t *testing.T) {
	d := parseDecls(t)
	for file, want := range map[string]string{"shim.h": d.Header(), "shim.c": d.Source()} {
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s differs from what mlxc.decl generates: run go generate ./engine/backend/mlx", file)
		}
	}
	for _, f := range d.Funcs {
		if !strings.Contains(d.Header(), "static inline "+f.Ret+" "+f.Name+"(") {
			t.Errorf("shim.h has no forwarder for %s", f.Name)
		}
	}
}

func TestShimgenRejects(t *testing.T) {
	for name, src := range map[string]string{
		"no separator":     "typedef int x;\nint f(int a);\n",
		"unnamed param":    "t\n%%\nint f(int);\n",
		"function pointer": "t\n%%\nint f(void (*g)(void* p));\n",
		"twice":            "t\n%%\nint f(int a);\nint f(int b);\n",
		"not a prototype":  "t\n%%\nint f;\n",
		"no functions":     "t\n%%\n// nothing\n",
	} {
		if _, err := shimgen.Parse(src); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

func TestCandidates(t *testing.T) {
	home := t.TempDir()
	name := LibraryName()
	old := filepath.Join(CacheDir(home), "aaa-mlx0.31.1", "lib", name)
	newer := filepath.Join(CacheDir(home), "bbb-mlx0.31.2", "lib", name)
	for i, p := range []string{old, newer} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		when := time.Now().Add(time.Duration(i-2) * time.Hour)
		if err := os.Chtimes(p, when, when); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	exe := "/opt/fusion/bin/fusion"
	for _, c := range []struct {
		name, env string
		want      []string
	}{
		{"no env", "", []string{"/opt/fusion/bin/" + name, newer, old}},
		{"env file", "/x/libmlxc-custom.so", []string{"/x/libmlxc-custom.so"}},
		{"env dir", dir, []string{filepath.Join(dir, name), filepath.Join(dir, "lib", name)}},
	} {
		got := candidates(c.env, exe, home)
		if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("%s: candidates\n%s\nwant\n%s", c.name, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
	}
}

// TestAvailableWithoutLibrary runs this test binary with a HOME whose
// build cache holds the library (when this process found one) and with
// FUSION_MLXC pointing nowhere: the setting wins, and Available says where
// it looked and how to build the library; nothing aborts. Without the
// setting, the same HOME's cache entry is found.
func TestAvailableWithoutLibrary(t *testing.T) {
	if os.Getenv("FUSION_MLX_HELPER") == "1" {
		if err := Available(); err != nil {
			if _, oerr := Open(); oerr == nil {
				t.Fatal("Open succeeded while Available failed")
			}
			os.Stdout.WriteString("AVAILABLE: " + err.Error() + "\n")
			return
		}
		path, _ := Library()
		os.Stdout.WriteString("AVAILABLE: ok " + path + "\n")
		return
	}
	home := t.TempDir()
	real, _ := Library()
	if real != "" {
		// A cache entry in the fake HOME: a link to the real one's lib.
		entry := filepath.Join(CacheDir(home), "test-entry")
		if err := os.MkdirAll(entry, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Dir(real), filepath.Join(entry, "lib")); err != nil {
			t.Fatal(err)
		}
	}
	run := func(env ...string) string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestAvailableWithoutLibrary$", "-test.v")
		for _, e := range os.Environ() {
			if !strings.HasPrefix(e, EnvLibrary+"=") && !strings.HasPrefix(e, "HOME=") {
				cmd.Env = append(cmd.Env, e)
			}
		}
		cmd.Env = append(cmd.Env, append(env, "FUSION_MLX_HELPER=1", "HOME="+home)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper: %v\n%s", err, out)
		}
		return string(out)
	}
	missing := filepath.Join(t.TempDir(), "nothing-here")
	out := run(EnvLibrary + "=" + missing)
	want := []string{"AVAILABLE: mlx: "}
	if cgoEnabled {
		want = append(want, "libmlxc not found", "make build-mlx", missing+": not found")
	} else {
		want = append(want, "built without cgo")
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("with %s unset: helper output lacks %q:\n%s", EnvLibrary, w, out)
		}
	}
	if real != "" {
		entry := filepath.Join(CacheDir(home), "test-entry", "lib", LibraryName())
		if out := run(); !strings.Contains(out, "AVAILABLE: ok "+entry) {
			t.Errorf("the fake HOME's cache entry was not used:\n%s", out)
		}
	}
}

// TestBuildsWithoutCgo compiles and runs this package's tests with
// CGO_ENABLED=0: the C files are left out, and Available says why.
func TestBuildsWithoutCgo(t *testing.T) {
	if !cgoEnabled {
		if err := Available(); err == nil || !strings.Contains(err.Error(), "built without cgo") {
			t.Fatalf("Available without cgo: %v", err)
		}
		return
	}
	if testing.Short() {
		t.Skip("compiles the package again (-short)")
	}
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(goTool, "test", "-count=1", "-run", "^(TestBuildsWithoutCgo|TestAvailableWithoutLibrary|TestShimUpToDate)$", "-v", ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("CGO_ENABLED=0 go test: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestBuildsWithoutCgo") {
		t.Fatalf("the test did not run without cgo:\n%s", out)
	}
}

// TestMLXCScript checks scripts/mlxc.sh's cache logic without building:
// an entry with the key of this tarball and MLX version is reused (its
// path is the only thing on stdout), and a missing tarball fails with the
// reason.
func TestMLXCScript(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the Linux branch of the script (macOS needs Homebrew's mlx)")
	}
	python := os.Getenv("FUSION_PYTHON")
	if python == "" {
		python = "../../../.cache/venv/bin/python"
	}
	if _, err := os.Stat(python); err != nil {
		if os.Getenv("FUSION_REQUIRE_FIXTURES") == "1" {
			t.Fatalf("no python with the mlx-cpu wheel at %s: %v", python, err)
		}
		t.Skipf("no python with the mlx-cpu wheel at %s (make test-deps)", python)
	}
	script, err := filepath.Abs("../../../scripts/mlxc.sh")
	if err != nil {
		t.Fatal(err)
	}
	run := func(env ...string) (string, string, error) {
		cmd := exec.Command("bash", script)
		cmd.Env = append(os.Environ(), env...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	tarball := filepath.Join(t.TempDir(), "mlx-c.tar.gz")
	if err := os.WriteFile(tarball, []byte("any bytes: the key is their checksum"), 0o644); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	base := []string{"FUSION_PYTHON=" + python, "FUSION_MLXC_TARBALL=" + tarball, "FUSION_MLXC_CACHE=" + cache}
	out, errOut, err := run(append(base, "FUSION_MLXC_TARBALL="+filepath.Join(cache, "missing.tar.gz"))...)
	if err == nil || !strings.Contains(errOut, "no mlx-c source tarball") || out != "" {
		t.Errorf("missing tarball: err %v, stdout %q, stderr %q", err, out, errOut)
	}
	entries, _ := filepath.Glob(filepath.Join(cache, "*"))
	if len(entries) != 0 {
		t.Errorf("a failed run left %v", entries)
	}
	// The key (sha256 prefix, MLX version, OS, arch) from a build that
	// fails at once (the tarball is not gzip) and must leave nothing.
	_, errOut, err = run(base...)
	if strings.Contains(errOut, "no MLX CMake package") && os.Getenv("FUSION_REQUIRE_FIXTURES") != "1" {
		t.Skipf("the venv has no mlx-cpu wheel (make test-deps): %s", errOut)
	}
	if err == nil || !strings.Contains(errOut, "building ") {
		t.Fatalf("a bad tarball: err %v, stderr %q", err, errOut)
	}
	key := strings.Fields(errOut[strings.Index(errOut, "building ")+len("building "):])[0]
	if !strings.Contains(key, "-mlx0.31.2-Linux-") {
		t.Fatalf("key %q lacks the MLX version and OS", key)
	}
	if left, _ := filepath.Glob(filepath.Join(cache, ".build-*")); len(left) != 0 {
		t.Errorf("the failed build left its temporary directory: %v", left)
	}
	entry := filepath.Join(cache, key)
	if err := os.MkdirAll(filepath.Join(entry, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(entry, "lib", "libmlxc.so"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = run(base...)
	if err != nil || out != entry+"\n" || !strings.Contains(errOut, "cached: "+entry) {
		t.Errorf("cached entry: err %v, stdout %q, stderr %q", err, out, errOut)
	}
}
