package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"fusion/internal/testenv"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunScriptChild is the fusion binary for TestMakeRunAnswersEnd: the
// test binary re-executed with the command line after "--".
func TestRunScriptChild(t *testing.T) {
	if os.Getenv("FUSION_RUN_SCRIPT_CHILD") == "" {
		t.Skip("only runs as a child of TestMakeRunAnswersEnd")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, flag.Args(), os.Stdout, os.Stderr))
}

// TestMakeRunAnswersEnd runs scripts/run.sh (what `make run` runs) on an
// empty models directory: the demo model it creates ends its answers on its
// own, so chat completions without max_tokens finish with "stop" after a
// few dozen tokens instead of running to the node's cap.
func TestMakeRunAnswersEnd(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "fusion")
	script := fmt.Sprintf("#!/bin/sh\nFUSION_RUN_SCRIPT_CHILD=1 exec %q -test.run='^TestRunScriptChild$' -- \"$@\"\n", os.Args[0])
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0])
	cmd := exec.Command("bash", filepath.Join("..", "..", "scripts", "run.sh"), bin, filepath.Join(dir, "data"), filepath.Join(dir, "models"), "--threads", "1")
	cmd.Env = append(os.Environ(), "FUSION_LISTEN="+listen)
	var out testenv.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-stopped:
			if err != nil {
				t.Errorf("run.sh: %v\n%s", err, out.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("run.sh did not stop on SIGTERM:\n%s", out.String())
		}
	}()
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(out.String(), "the node is up"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("run.sh did not come up:\n%s", out.String())
		}
	}
	if !strings.Contains(out.String(), `"model":"demo"`) {
		t.Fatalf("run.sh suggests no curl for the demo model:\n%s", out.String())
	}
	lengths := map[int]bool{}
	for _, prompt := range []string{"Hello!", "What is the capital of France?", "Write a haiku about the sea.", "hi", "Explain attention in one paragraph."} {
		body := fmt.Sprintf(`{"model":"demo","messages":[{"role":"user","content":%q}]}`, prompt)
		resp, err := http.Post("http://"+listen+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
			}
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || len(r.Choices) != 1 {
			t.Fatalf("%q: status %d, %+v, %v", prompt, resp.StatusCode, r, err)
		}
		if n := r.Usage.CompletionTokens; r.Choices[0].FinishReason != "stop" || n < 4 || n > 100 {
			t.Errorf("%q: finish_reason %q after %d tokens, want stop within 100", prompt, r.Choices[0].FinishReason, n)
		}
		lengths[r.Usage.CompletionTokens] = true
	}
	if len(lengths) < 2 {
		t.Errorf("every answer has the same length: %v", lengths)
	}
}
