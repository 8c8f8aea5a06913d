package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestSummary(t *testing.T) {
	events := []event{
		{Action: "start", Package: "p/ok"},
		{Action: "run", Package: "p/ok", Test: "TestA"},
		{Action: "output", Package: "p/ok", Test: "TestA", Output: "=== RUN   TestA\n"},
		{Action: "output", Package: "p/ok", Test: "TestA", Output: "    a_test.go:9: noisy log of a passing test\n"},
		{Action: "output", Package: "p/ok", Test: "TestA", Output: "--- PASS: TestA (0.00s)\n"},
		{Action: "pass", Package: "p/ok", Test: "TestA"},
		{Action: "run", Package: "p/ok", Test: "TestNetns"},
		{Action: "output", Package: "p/ok", Test: "TestNetns", Output: "=== RUN   TestNetns\n"},
		{Action: "output", Package: "p/ok", Test: "TestNetns", Output: "    n_test.go:3: skipped: network namespaces need root\n"},
		{Action: "output", Package: "p/ok", Test: "TestNetns", Output: "--- SKIP: TestNetns (0.00s)\n"},
		{Action: "skip", Package: "p/ok", Test: "TestNetns"},
		{Action: "output", Package: "p/ok", Output: "ok  \tp/ok\t1.5s\n"},
		{Action: "pass", Package: "p/ok", Elapsed: 1.5},
		{Action: "run", Package: "p/bad", Test: "TestB"},
		{Action: "output", Package: "p/bad", Test: "TestB", Output: "=== RUN   TestB\n"},
		{Action: "output", Package: "p/bad", Test: "TestB", Output: "    b_test.go:7: got 3, want 4\n"},
		{Action: "output", Package: "p/bad", Test: "TestB", Output: "--- FAIL: TestB (0.01s)\n"},
		{Action: "fail", Package: "p/bad", Test: "TestB"},
		{Action: "output", Package: "p/bad", Output: "FAIL\n"},
		{Action: "output", Package: "p/bad", Output: "FAIL\tp/bad\t0.2s\n"},
		{Action: "fail", Package: "p/bad", Elapsed: 0.2},
		{Action: "build-output", ImportPath: "p/broken [p/broken.test]", Output: "# p/broken\n"},
		{Action: "build-output", ImportPath: "p/broken [p/broken.test]", Output: "broken.go:3:1: syntax error\n"},
		{Action: "build-fail", ImportPath: "p/broken [p/broken.test]"},
		{Action: "skip", Package: "p/empty"},
	}
	var out bytes.Buffer
	s := &summary{out: &out, output: map[string][]string{}}
	for _, e := range events {
		// Through JSON, as go test writes them.
		b, _ := json.Marshal(e)
		var back event
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		s.add(back)
	}
	got := out.String()
	for _, want := range []string{
		"ok  \tp/ok\t1.500s\n",
		"    b_test.go:7: got 3, want 4\n--- FAIL: TestB (0.01s)\n",
		"FAIL\tp/bad\t0.2s\n",
		"broken.go:3:1: syntax error\n",
		"?   \tp/empty\t[no test files]\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "noisy log") {
		t.Errorf("a passing test's output was printed:\n%s", got)
	}
	if strings.Count(got, "FAIL\tp/bad") != 1 {
		t.Errorf("the package's FAIL line is not printed once:\n%s", got)
	}
	if !s.failed {
		t.Error("failures not noticed")
	}
	want := []string{"SKIP p/ok TestNetns: n_test.go:3: skipped: network namespaces need root"}
	if len(s.skips) != 1 || s.skips[0] != want[0] {
		t.Errorf("skips %q, want %q", s.skips, want)
	}
}
