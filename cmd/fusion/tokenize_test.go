package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestTokenizeCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"models", "create-demo", "--out", dir}, &out, &errb); code != 0 {
		t.Fatalf("create-demo exited %d: %s", code, errb.String())
	}
	call := func(args ...string) (int, map[string]any) {
		out.Reset()
		errb.Reset()
		code := run(context.Background(), append([]string{"tokenize", "--model", dir}, args...), &out, &errb)
		var m map[string]any
		if code == 0 {
			if err := json.Unmarshal(out.Bytes(), &m); err != nil {
				t.Fatalf("output %q: %v", out.String(), err)
			}
		}
		return code, m
	}

	code, chat := call("--messages", `[{"role":"user","content":"hi"}]`, "--enable-thinking", "false")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if chat["prompt"] != "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n" {
		t.Errorf("prompt %q", chat["prompt"])
	}
	var ids []string
	for _, v := range chat["tokens"].([]any) {
		ids = append(ids, strconv.Itoa(int(v.(float64))))
	}
	if int(chat["count"].(float64)) != len(ids) {
		t.Errorf("count %v for %d tokens", chat["count"], len(ids))
	}
	code, back := call("--decode", strings.Join(ids, ","))
	if code != 0 || back["prompt"] != chat["prompt"] {
		t.Errorf("decode: exit %d, %q, want %q", code, back["prompt"], chat["prompt"])
	}

	code, viaRequest := call("--request", `{"messages":[{"role":"user","content":"hi"}],"enable_thinking":false}`)
	if code != 0 || !slices.Equal(viaRequest["tokens"].([]any), chat["tokens"].([]any)) {
		t.Errorf("--request gave %v (exit %d), flags gave %v", viaRequest["tokens"], code, chat["tokens"])
	}

	for _, bad := range [][]string{
		{"--decode", "1,x"},
		{"--messages", "not json"},
		{"--enable-thinking", "maybe", "text"},
		{"--decode", "999999"},
		{},
	} {
		if code, _ := call(bad...); code == 0 {
			t.Errorf("tokenize %v succeeded", bad)
		} else if errb.Len() == 0 {
			t.Errorf("tokenize %v failed without a message", bad)
		}
	}
}
