// Command testsum reads `go test -json` on stdin, copies it to a log file,
// and prints what `go test` would without -v — one result line per
// package and the full output of every failed test or package — plus one
// line per skipped test with its reason, which `go test` alone hides.
// It exits 1 when anything failed.
//
//	go test -json ./... | go run ./internal/testsum -log .cache/test.json
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output and build-fail events
	Test       string
	Elapsed    float64
	Output     string
}

type summary struct {
	out    io.Writer
	output map[string][]string // package + "\x00" + test → output lines
	skips  []string
	failed bool
}

func key(pkg, test string) string { return pkg + "\x00" + test }

func (s *summary) add(e event) {
	pkg := e.Package
	if pkg == "" {
		pkg = e.ImportPath
	}
	k := key(pkg, e.Test)
	switch e.Action {
	case "output", "build-output":
		s.output[k] = append(s.output[k], e.Output)
	case "skip":
		if e.Test == "" {
			fmt.Fprintf(s.out, "?   \t%s\t[no test files]\n", pkg)
			return
		}
		s.skips = append(s.skips, fmt.Sprintf("SKIP %s %s: %s", pkg, e.Test, skipReason(s.output[k])))
		delete(s.output, k)
	case "pass":
		if e.Test == "" {
			fmt.Fprintf(s.out, "ok  \t%s\t%.3fs\n", pkg, e.Elapsed)
		}
		delete(s.output, k)
	case "fail", "build-fail":
		s.failed = true
		if e.Test != "" {
			fmt.Fprintf(s.out, "%s", strings.Join(s.output[k], ""))
			delete(s.output, k)
			return
		}
		// The package's own output: build errors, panics and timeouts
		// outside any test, and go test's FAIL line.
		fmt.Fprintf(s.out, "%s", strings.Join(s.output[k], ""))
		if e.Action == "fail" && !strings.Contains(strings.Join(s.output[k], ""), "FAIL\t"+pkg) {
			fmt.Fprintf(s.out, "FAIL\t%s\t%.3fs\n", pkg, e.Elapsed)
		}
		delete(s.output, k)
	}
}

// skipReason is what the test logged before skipping, without the
// framework's own lines.
func skipReason(lines []string) string {
	var parts []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		parts = append(parts, t)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " | ")
}

func main() {
	logPath := flag.String("log", "", "copy the JSON stream to this file")
	flag.Parse()
	in := io.Reader(os.Stdin)
	if *logPath != "" {
		if err := os.MkdirAll(filepath.Dir(*logPath), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "testsum:", err)
			os.Exit(2)
		}
		f, err := os.Create(*logPath)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testsum:", err)
			os.Exit(2)
		}
		defer f.Close()
		in = io.TeeReader(os.Stdin, f)
	}
	s := &summary{out: os.Stdout, output: map[string][]string{}}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// Not JSON (go vet or the go command itself): pass it on.
			fmt.Println(sc.Text())
			continue
		}
		s.add(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(2)
	}
	if len(s.skips) > 0 {
		fmt.Printf("\n%d skipped:\n%s\n", len(s.skips), strings.Join(s.skips, "\n"))
	}
	if s.failed {
		os.Exit(1)
	}
}
