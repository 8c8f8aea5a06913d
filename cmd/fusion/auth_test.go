package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestClusterSecretCommand(t *testing.T) {
	var seen []string
	for range 2 {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{"cluster", "secret"}, &out, &errb); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		s := strings.TrimSpace(out.String())
		if b, err := base64.RawURLEncoding.DecodeString(s); err != nil || len(b) != 32 {
			t.Fatalf("secret %q: %v", s, err)
		}
		if slices.Contains(seen, s) {
			t.Fatal("the same secret twice")
		}
		seen = append(seen, s)
	}
}

func TestAuthSettings(t *testing.T) {
	dir := t.TempDir()
	write := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyFile, secretFile, empty := write("key", "  admin-key\n"), write("secret", "cluster-s\n"), write("empty", "\n")
	none := func(string) string { return "" }
	s, err := resolveServe([]string{"--api-key-file", keyFile, "--cluster-secret-file", secretFile, "--cluster-secret-previous", "old",
		"--insecure-cluster", "true", "--insecure-no-auth", "true", "--auth-failures", "-1", "--max-subkeys", "5", "--key-usage-interval", "100ms"}, none, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := s.cfg
	if c.APIKey != "admin-key" || c.Cluster.Secret != "cluster-s" || !slices.Equal(c.Cluster.SecretAccept, []string{"old"}) ||
		!c.Cluster.Insecure || !c.InsecureNoAuth || c.AuthFailures != -1 || c.MaxSubKeys != 5 || c.KeyUsageInterval.String() != "100ms" {
		t.Fatalf("settings: %+v", c)
	}
	for _, args := range [][]string{
		{"--api-key", "k", "--api-key-file", keyFile},
		{"--cluster-secret", "k", "--cluster-secret-file", secretFile},
		{"--api-key-file", empty},
		{"--api-key-file", filepath.Join(dir, "missing")},
		{"--insecure-cluster", "maybe"},
		{"--auth-failures", "-2"},
	} {
		if _, err := resolveServe(args, none, io.Discard); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	for _, name := range []string{"api-key", "cluster-secret", "cluster-secret-previous"} {
		if !isSecretSetting(name) {
			t.Errorf("%s is not marked secret", name)
		}
	}
}
