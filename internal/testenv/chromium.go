package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Chromium returns the path of Debian's chromium ($FUSION_CHROMIUM, else
// chromium or chromium-browser on the PATH), for the browser tests.
func Chromium(t testing.TB) string {
	t.Helper()
	names := []string{"chromium", "chromium-browser"}
	if p := os.Getenv("FUSION_CHROMIUM"); p != "" {
		names = []string{p}
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	missing(t, "chromium not found (%v)", names)
	return ""
}

// ScreenshotsDir returns where browser tests write their screenshots
// (.cache/screenshots at the module root), creating it.
func ScreenshotsDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(moduleRoot(), ".cache", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
