package mlx

import (
	"os"
	"path/filepath"
	"runtime"
	"sort"
)

// EnvLibrary names the environment variable that points at libmlxc: the
// library file itself, or a directory holding it (directly or in lib/).
const EnvLibrary = "FUSION_MLXC"

// LibraryName is libmlxc's file name on this OS.
func LibraryName() string {
	if runtime.GOOS == "darwin" {
		return "libmlxc.dylib"
	}
	return "libmlxc.so"
}

// CacheDir is where scripts/mlxc.sh installs the libraries it builds, one
// directory per mlx-c source and MLX version: ~/.cache/fusion/mlxc.
func CacheDir(home string) string {
	return filepath.Join(home, ".cache", "fusion", "mlxc")
}

// candidates lists where libmlxc is looked for, in order: when
// $FUSION_MLXC is set, there only (an explicit choice that points nowhere
// is reported, not silently replaced); otherwise next to the executable,
// then every entry of the build cache, the most recently built first.
func candidates(env, exe, home string) []string {
	name := LibraryName()
	if env != "" {
		if fi, err := os.Stat(env); err == nil && fi.IsDir() {
			return []string{filepath.Join(env, name), filepath.Join(env, "lib", name)}
		}
		return []string{env}
	}
	var out []string
	if exe != "" {
		out = append(out, filepath.Join(filepath.Dir(exe), name))
	}
	if home != "" {
		found, _ := filepath.Glob(filepath.Join(CacheDir(home), "*", "lib", name))
		sort.SliceStable(found, func(i, j int) bool { return modTime(found[i]) > modTime(found[j]) })
		out = append(out, found...)
	}
	return out
}

func modTime(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.ModTime().UnixNano()
}

// searchPaths is candidates for this process.
func searchPaths() []string {
	exe, _ := os.Executable()
	home, _ := os.UserHomeDir()
	return candidates(os.Getenv(EnvLibrary), exe, home)
}
