package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"fusion/dashboard"
)

// TestServePanelSettings: the admin panel's session limits are flags (and
// FUSION_ variables) with the dashboard's defaults, checked like the rest.
func TestServePanelSettings(t *testing.T) {
	s, err := resolveServe(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if p := s.cfg.Panel; p.SessionTTL != dashboard.DefaultSessionTTL || p.MaxSessions != dashboard.DefaultMaxSessions {
		t.Fatalf("defaults: %+v", p)
	}
	s, err = resolveServe([]string{"--panel-session-ttl", "30m"},
		func(k string) string { return map[string]string{"FUSION_PANEL_MAX_SESSIONS": "7"}[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if p := s.cfg.Panel; p.SessionTTL != 30*time.Minute || p.MaxSessions != 7 {
		t.Fatalf("set: %+v", p)
	}
	s, err = resolveServe([]string{"--panel-cookie-domain", "lan.example"}, func(string) string { return "" }, io.Discard)
	if err != nil || s.cfg.Panel.CookieDomain != "lan.example" {
		t.Fatalf("cookie domain: %v %+v", err, s.cfg.Panel)
	}
	for _, args := range [][]string{{"--panel-session-ttl", "0s"}, {"--panel-max-sessions", "0"}, {"--panel-session-ttl", "soon"},
		{"--panel-cookie-domain", "http://lan.example"}, {"--panel-cookie-domain", "lan.example:8000"}, {"--panel-cookie-domain", "a b"}} {
		if _, err := resolveServe(args, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%v: err = %v", args, err)
		}
	}
}
