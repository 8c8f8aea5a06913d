package main

import (
	"context"
	"io"
	"sort"
	"strings"
)

// benchmarks maps a `fusion bench NAME` to the function that runs it and
// writes one JSON object to stdout.
func benchmarks() map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
		"batch":     benchBatch,
		"engine":    benchEngine,
		"cache":     benchCache,
		"tokenizer": benchTokenizer,
		"server":    benchServer,
		"forward":   benchForward,
		"grammar":   benchGrammar,
		"raft":      benchRaft,
	}
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	all := benchmarks()
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(args) == 0 {
		return usagef("name a benchmark: %s", strings.Join(names, ", "))
	}
	b, ok := all[args[0]]
	if !ok {
		return usagef("unknown benchmark %q (have: %s)", args[0], strings.Join(names, ", "))
	}
	return b(ctx, args[1:], stdout, stderr)
}
