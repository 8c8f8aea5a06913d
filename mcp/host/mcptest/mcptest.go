// Package mcptest gives tests the real MCP servers `make test-deps`
// installs from npm, and files for server-filesystem to read.
package mcptest

import (
	"os"
	"path/filepath"
	"testing"

	"fusion/internal/testenv"
)

// Everything returns node and the entry script of
// @modelcontextprotocol/server-everything (run it with "stdio",
// "streamableHttp" or "sse").
func Everything(t testing.TB) (node, script string) {
	t.Helper()
	return testenv.NodeScript(t, "@modelcontextprotocol/server-everything", "dist/index.js")
}

// Filesystem returns node and the entry script of
// @modelcontextprotocol/server-filesystem (its arguments are the
// directories it may read).
func Filesystem(t testing.TB) (node, script string) {
	t.Helper()
	return testenv.NodeScript(t, "@modelcontextprotocol/server-filesystem", "dist/index.js")
}

// WAV is a valid, empty 8 kHz mono WAV file: server-filesystem returns it
// as audio content.
var WAV = []byte("RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x40\x1f\x00\x00\x80\x3e\x00\x00\x02\x00\x10\x00data\x00\x00\x00\x00")

// Files writes a fresh directory holding note.txt (text) and beep.wav
// (WAV) and returns it.
func Files(t testing.TB, text string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string][]byte{"note.txt": []byte(text), "beep.wav": WAV} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
