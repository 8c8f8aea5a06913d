// Package bench holds the benchmarks of `fusion bench` (and so of `make
// bench`): each one takes its options, measures, and writes one JSON object
// to stdout, with progress on stderr. The options come parsed; the command
// line is cmd/fusion's.
//
// A new benchmark is a function NAME(ctx, NAMEOptions, stdout[, stderr])
// with a DefaultNAMEOptions that `make bench` uses, a command in
// cmd/fusion/bench.go that maps flags onto the options, and its name in
// the parts of scripts/bench.sh. Options out of range are an
// *OptionError, which the command reports as a usage error.
package bench

import (
	"fmt"
	"os"
	"path/filepath"
)

// DefaultCacheDir is where the benchmark models are created (and reused).
const DefaultCacheDir = ".cache/bench"

// OptionError is an option out of range: the caller's mistake, which a
// command reports as a usage error.
type OptionError struct{ msg string }

func (e *OptionError) Error() string { return e.msg }

func optionErrorf(format string, a ...any) error { return &OptionError{fmt.Sprintf(format, a...)} }

// fixturesDir is $FUSION_FIXTURES, else .cache/fixtures.
func fixturesDir() string {
	if d := os.Getenv("FUSION_FIXTURES"); d != "" {
		return d
	}
	return filepath.Join(".cache", "fixtures")
}

// pythonPath is $FUSION_PYTHON, else .cache/venv/bin/python.
func pythonPath() string {
	if p := os.Getenv("FUSION_PYTHON"); p != "" {
		return p
	}
	return filepath.Join(".cache", "venv", "bin", "python")
}
