// Command fusion is the one binary of the project: a node (serve), model
// tools (models), tokenization from the command line (tokenize), benchmarks
// (bench), cluster tools (cluster) and the version. It parses arguments and
// calls into the packages that do the work: each command is a function
// that maps its flags onto a package's options and calls it, listed in a
// command table (commands, and the tables of the groups), which dispatch
// walks.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"syscall"
)

// version is set at link time (-ldflags "-X main.version=...").
var version = "0.1.0-dev"

// command is one entry of a command table: a leaf that runs (given the
// arguments after its name) or a group whose next argument names one of
// its subs. A new sub-command is a file with a function that parses its
// flags and calls a package, and one line in a table.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	subs    map[string]command
}

func commands() map[string]command {
	return map[string]command{
		"serve":    {summary: "start a node", run: runServe},
		"models":   {summary: "model tools: create-demo, inspect, pull", subs: modelsCommands()},
		"tokenize": {summary: "tokenize text or a chat with a model's tokenizer", run: runTokenize},
		"bench":    {summary: "run a benchmark and print JSON", subs: benchCommands()},
		"cluster":  {summary: "cluster tools: status, certs, backup, restore", subs: clusterCommands()},
		"doctor":   {summary: "check a node's machine, settings, ports and cluster, and say what to fix", run: runDoctor},
		"health":   {summary: "ask a node for /health: exit 0 when it answers 200", run: runHealth},
		"service":  {summary: "install fusion as a service: install, uninstall, status", subs: serviceCommands()},
		"version":  {summary: "print the version", run: runVersion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command args name and returns the exit status: 0, 1 for a
// failure, 2 for a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := dispatch(ctx, "fusion", commands(), args, stdout, stderr)
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(usageError)):
		fmt.Fprintln(stderr, err)
		return 2
	default:
		fmt.Fprintln(stderr, err)
		return 1
	}
}

// dispatch runs the command of table that args[0] names, path being the
// words before it ("fusion", "fusion models"). Without a name, or with an
// unknown one, it prints the table's usage and returns a usage error; with
// -h, help or --help it prints the usage and returns flag.ErrHelp. Errors
// of a command come back prefixed with its path.
func dispatch(ctx context.Context, path string, table map[string]command, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr, path, table)
		return usageError{path + ": missing command"}
	}
	switch args[0] {
	case "-h", "--help", "help":
		usage(stderr, path, table)
		return flag.ErrHelp
	}
	c, ok := table[args[0]]
	if !ok {
		usage(stderr, path, table)
		return usageError{fmt.Sprintf("%s: unknown command %q", path, args[0])}
	}
	name := path + " " + args[0]
	if c.subs != nil {
		return dispatch(ctx, name, c.subs, args[1:], stdout, stderr)
	}
	if err := c.run(ctx, args[1:], stdout, stderr); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// usage lists a command table.
func usage(w io.Writer, path string, table map[string]command) {
	fmt.Fprintf(w, "usage: %s <command> [flags]\n\n", path)
	names := slices.Sorted(maps.Keys(table))
	width := 0
	for _, n := range names {
		width = max(width, len(n))
	}
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s  %s\n", width, n, table[n].summary)
	}
	fmt.Fprintln(w)
}

// usageError marks errors in how a command was called (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

func runVersion(_ context.Context, _ []string, stdout, _ io.Writer) error {
	fmt.Fprintf(stdout, "fusion %s\n", version)
	return nil
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}
