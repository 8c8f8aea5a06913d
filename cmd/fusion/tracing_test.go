package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

func TestServeOTLPFlags(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		env      map[string]string
		want     string // error text; "" when it must parse
		endpoint string
		ratio    float64
	}{
		{args: nil, endpoint: ""},
		{args: []string{"--otlp-endpoint", "grpc://127.0.0.1:4317"}, endpoint: "grpc://127.0.0.1:4317"},
		{args: []string{"--otlp-endpoint", "collector:4317", "--otlp-sample-ratio", "0.25"}, endpoint: "collector:4317", ratio: 0.25},
		{env: map[string]string{"FUSION_OTLP_ENDPOINT": "http://c:4318"}, endpoint: "http://c:4318"},
		{args: []string{"--otlp-endpoint", "collector"}, want: "not an OTLP endpoint"},
		{args: []string{"--otlp-sample-ratio", "0"}, want: "not a ratio"},
		{args: []string{"--otlp-sample-ratio", "1.5"}, want: "not a ratio"},
	} {
		s, err := resolveServe(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		switch {
		case tc.want != "":
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
			}
		case err != nil:
			t.Errorf("%v %v: %v", tc.args, tc.env, err)
		case s.cfg.Tracing.Endpoint != tc.endpoint || tc.ratio != 0 && s.cfg.Tracing.SampleRatio != tc.ratio:
			t.Errorf("%v %v: tracing %+v", tc.args, tc.env, s.cfg.Tracing)
		}
	}
	// A scheme the exporter does not speak stops the node before it
	// listens.
	var errb strings.Builder
	code := run(context.Background(), []string{"serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--otlp-endpoint", "ftp://c:21"}, io.Discard, &errb)
	if code != 1 || !strings.Contains(errb.String(), "OTLP endpoint") {
		t.Errorf("ftp endpoint: exit %d: %s", code, errb.String())
	}
}
