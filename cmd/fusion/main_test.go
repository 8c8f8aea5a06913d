package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
)

// TestDispatch runs the command tables as a user meets them: a missing or
// unknown command at any level is a usage error (exit 2) that lists that
// level's commands, help lists them and exits 0, and a leaf's own errors
// come back prefixed with its path.
func TestDispatch(t *testing.T) {
	top := []string{"bench", "cluster", "doctor", "health", "models", "serve", "service", "tokenize", "version"}
	benches := []string{"auth", "batch", "cache", "embed", "engine", "forward", "grammar", "image", "mlx", "moe", "pipeline", "pipeline-stage", "raft", "server", "speculative", "speech", "tokenizer", "tokens", "whisper"}
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string   // a line stderr must hold
		lists  []string // commands the usage must list
	}{
		{"no command", nil, 2, "fusion: missing command", top},
		{"unknown command", []string{"frob"}, 2, `fusion: unknown command "frob"`, top},
		{"help", []string{"help"}, 0, "usage: fusion <command> [flags]", top},
		{"-h", []string{"-h"}, 0, "usage: fusion <command> [flags]", top},
		{"bench alone", []string{"bench"}, 2, "fusion bench: missing command", benches},
		{"unknown bench", []string{"bench", "frob"}, 2, `fusion bench: unknown command "frob"`, benches},
		{"bench help", []string{"bench", "--help"}, 0, "usage: fusion bench <command> [flags]", benches},
		{"unknown models command", []string{"models", "frob"}, 2, `fusion models: unknown command "frob"`, []string{"bench", "create-demo", "inspect", "pull", "quantize"}},
		{"unknown cluster command", []string{"cluster", "frob"}, 2, `fusion cluster: unknown command "frob"`, []string{"backup", "certs", "drain", "restore", "secret", "status", "undrain"}},
		{"bench flag out of range", []string{"bench", "batch", "-streams", "1,0"}, 2, `fusion bench batch: invalid value "1,0" for flag -streams`, nil},
		{"bench option out of range", []string{"bench", "tokenizer", "-strings", "0"}, 2, "fusion bench tokenizer: -strings and -repeat must be positive", nil},
		{"pipeline stages beyond the layers", []string{"bench", "pipeline", "-layers", "2", "-stages", "1,3"}, 2, "fusion bench pipeline: pipeline: want -layers", nil},
		{"bench positional argument", []string{"bench", "raft", "extra"}, 2, "fusion bench raft: unexpected arguments: extra", nil},
		{"bench flag help", []string{"bench", "grammar", "-h"}, 0, "-walks int", nil},
		{"cpuprofile of two formats", []string{"bench", "engine", "-cpuprofile", "x", "-formats", "bf16,mlx-q4"}, 2, "-cpuprofile takes one format", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), tc.args, &out, &errb)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.code, errb.String())
			}
			if !strings.Contains(errb.String(), tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, errb.String())
			}
			listed := listedCommands(errb.String())
			if tc.lists != nil && !slices.Equal(listed, tc.lists) {
				t.Errorf("usage lists %v, want %v", listed, tc.lists)
			}
			if out.Len() != 0 {
				t.Errorf("stdout is not empty: %q", out.String())
			}
		})
	}
}

// listedCommands returns the first word of each indented line of a usage
// text ("  name  summary").
func listedCommands(usage string) []string {
	var names []string
	for _, line := range strings.Split(usage, "\n") {
		if rest, ok := strings.CutPrefix(line, "  "); ok && rest != "" && rest[0] != ' ' && rest[0] != '-' {
			names = append(names, strings.Fields(rest)[0])
		}
	}
	return names
}
