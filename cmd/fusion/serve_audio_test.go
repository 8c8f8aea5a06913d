package main

import (
	"io"
	"testing"

	"fusion/router/openai"
)

// TestServeTranscriptionTokens: --max-transcription-tokens reaches the
// node's config (default openai's 65536); below 1 is refused.
func TestServeTranscriptionTokens(t *testing.T) {
	none := func(string) string { return "" }
	s, err := resolveServe([]string{"--max-transcription-tokens", "100"}, none, io.Discard)
	if err != nil || s.cfg.MaxTranscriptionTokens != 100 {
		t.Fatalf("--max-transcription-tokens 100: %v, %d", err, s.cfg.MaxTranscriptionTokens)
	}
	if s, err = resolveServe(nil, none, io.Discard); err != nil || s.cfg.MaxTranscriptionTokens != openai.DefaultMaxTranscriptionTokens {
		t.Fatalf("default: %v, %d", err, s.cfg.MaxTranscriptionTokens)
	}
	if _, err := resolveServe([]string{"--max-transcription-tokens", "0"}, none, io.Discard); err == nil {
		t.Error("--max-transcription-tokens 0 accepted")
	}
}

// TestServeVADModel: --vad-model names the model vad_filter and batched
// transcriptions use (default openai's silero-vad).
func TestServeVADModel(t *testing.T) {
	none := func(string) string { return "" }
	s, err := resolveServe([]string{"--vad-model", "my-vad"}, none, io.Discard)
	if err != nil || s.cfg.VADModel != "my-vad" {
		t.Fatalf("--vad-model my-vad: %v, %q", err, s.cfg.VADModel)
	}
	if s, err = resolveServe(nil, none, io.Discard); err != nil || s.cfg.VADModel != openai.DefaultVADModel {
		t.Fatalf("default: %v, %q", err, s.cfg.VADModel)
	}
}
