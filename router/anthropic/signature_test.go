package anthropic

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"fusion/engine"
)

func mustCodec(key []byte) *thinkingCodec {
	c, err := newThinkingCodec(key)
	if err != nil {
		panic(err)
	}
	return c
}

// testCodec signs the blocks of the package's tests; testSigner signs as
// the demo model, thinking shown.
var (
	testCodec  = mustCodec(bytes.Repeat([]byte{7}, 32))
	testSigner = thinkingSigner{codec: testCodec, model: "demo"}
)

// flip changes one byte of a signature's decoded form.
func flip(t *testing.T, sig string, at int) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(sig)
	if err != nil {
		t.Fatal(err)
	}
	if at < 0 {
		at += len(b)
	}
	b[at] ^= 1
	return base64.StdEncoding.EncodeToString(b)
}

// TestThinkingSignature: a signed block opens to its own text and model,
// a sealed one to the text it carries; an edited text, a changed byte of
// the signature, another cluster's key or something else is refused with
// the reason.
func TestThinkingSignature(t *testing.T) {
	other := mustCodec(bytes.Repeat([]byte{8}, 32))
	signed := testCodec.sign("qwen3", "Let me think.")
	sealed := testCodec.seal("qwen3", "Secret plan.")
	if s2 := testCodec.seal("qwen3", "Secret plan."); s2 == sealed {
		t.Errorf("two seals of the same text are equal (nonce reused): %s", s2)
	}
	if strings.Contains(string(mustDecode(t, sealed)), "Secret") {
		t.Errorf("a sealed signature shows its text: %s", sealed)
	}
	tests := []struct {
		name, sig, thinking string
		reasoning           string
		err                 error
	}{
		{"signed", signed, "Let me think.", "Let me think.", nil},
		{"signed, text edited", signed, "Let me think!", "", errSigMismatch},
		{"signed, text emptied", signed, "", "", errSigMismatch},
		{"signed, MAC byte changed", flip(t, signed, -1), "Let me think.", "", errSigMismatch},
		{"signed, model changed", flip(t, signed, 1+keyIDLen+1), "Let me think.", "", errSigMismatch},
		{"signed by another key", other.sign("qwen3", "Let me think."), "Let me think.", "", errSigOtherKey},
		{"sealed, empty block", sealed, "", "Secret plan.", nil},
		{"sealed, the same text shown", sealed, "Secret plan.", "Secret plan.", nil},
		{"sealed, another text shown", sealed, "Other plan.", "", errSigMismatch},
		{"sealed, ciphertext changed", flip(t, sealed, -1), "", "", errSigMismatch},
		{"sealed by another key", other.seal("qwen3", "Secret plan."), "", "", errSigOtherKey},
		{"empty", "", "x", "", errSigMalformed},
		{"not base64", "!!!", "x", "", errSigMalformed},
		{"Anthropic-like", "EqQBCkgIARABGAIiQL5Kp0a1", "x", "", errSigMalformed},
		{"truncated", signed[:12], "Let me think.", "", errSigMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reasoning, model, err := testCodec.open(tt.sig, tt.thinking)
			if !errors.Is(err, tt.err) || reasoning != tt.reasoning {
				t.Fatalf("open: %q, %v; want %q, %v", reasoning, err, tt.reasoning, tt.err)
			}
			if err == nil && model != "qwen3" {
				t.Errorf("model %q", model)
			}
		})
	}
	if _, err := newThinkingCodec(make([]byte, minKeyLen-1)); err == nil {
		t.Error("a short key was taken")
	}
}

func mustDecode(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestThinkingHistory: thinking blocks coming back are checked: a signed
// or sealed block becomes the assistant's reasoning_content; an edited,
// unsigned or foreign one is a 400 invalid_request_error naming the block.
func TestThinkingHistory(t *testing.T) {
	msgs := func(blocks string) string {
		return `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[` + blocks +
			`,{"type":"text","text":"Hello."}]},{"role":"user","content":"more"}]}`
	}
	sig := testCodec.sign("m", "I think.")
	tests := []struct {
		name, blocks string
		reasoning    string // the assistant message's reasoning_content
		err          string // else the 400's message holds this
	}{
		{"signed", `{"type":"thinking","thinking":"I think.","signature":"` + sig + `"}`, "I think.", ""},
		{"signed by another model of the cluster", `{"type":"thinking","thinking":"I think.","signature":"` + testCodec.sign("other", "I think.") + `"}`, "I think.", ""},
		{"omitted: empty with a sealed signature", `{"type":"thinking","thinking":"","signature":"` + testCodec.seal("m", "Hidden.") + `"}`, "Hidden.", ""},
		{"redacted_thinking with sealed data", `{"type":"redacted_thinking","data":"` + testCodec.seal("m", "Hidden.") + `"}`, "Hidden.", ""},
		{"edited", `{"type":"thinking","thinking":"I think not.","signature":"` + sig + `"}`, "",
			"messages.1.content.0: Invalid `signature` in `thinking` block: does not match the block (edited or forged)."},
		{"unsigned", `{"type":"thinking","thinking":"I think.","signature":""}`, "",
			"messages.1.content.0: Invalid `signature` in `thinking` block: not a signature this server made."},
		{"no signature", `{"type":"thinking","thinking":"I think."}`, "", "messages.1.content.0.signature: Field required"},
		{"another cluster", `{"type":"thinking","thinking":"I think.","signature":"` + mustCodec(bytes.Repeat([]byte{9}, 32)).sign("m", "I think.") + `"}`, "",
			"messages.1.content.0: Invalid `signature` in `thinking` block: made with another key"},
		{"redacted_thinking from elsewhere", `{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix"}`, "",
			"messages.1.content.0: Invalid `data` in `redacted_thinking` block: not a signature this server made."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := msgs(tt.blocks)
			if tt.err != "" {
				e := planErr(body)
				if e == nil || e.Status != 400 || e.Type != TypeInvalidRequest || !strings.Contains(e.Message, tt.err) {
					t.Fatalf("got %v, want a 400 with %q", e, tt.err)
				}
				return
			}
			p := mustPlan(t, body)
			r, _ := p.req.Messages[1].Get("reasoning_content")
			if r != tt.reasoning {
				t.Errorf("reasoning_content %q, want %q", r, tt.reasoning)
			}
		})
	}
}

// TestThinkingDisplay: thinking.display is summarized or omitted.
func TestThinkingDisplay(t *testing.T) {
	for _, tt := range []struct {
		thinking string
		omit     bool
		err      string
	}{
		{`{"type":"adaptive"}`, false, ""},
		{`{"type":"adaptive","display":"summarized"}`, false, ""},
		{`{"type":"adaptive","display":"omitted"}`, true, ""},
		{`{"type":"enabled","budget_tokens":1024,"display":"omitted"}`, true, ""},
		{`{"type":"adaptive","display":"full"}`, false, "thinking.display: Input should be 'summarized' or 'omitted'"},
		{`{"type":"adaptive","display":1}`, false, "thinking.display: Input should be a valid string"},
	} {
		body := `{"model":"m","max_tokens":2000,"thinking":` + tt.thinking + `,"messages":[{"role":"user","content":"hi"}]}`
		if tt.err != "" {
			if e := planErr(body); e == nil || e.Status != 400 || !strings.Contains(e.Message, tt.err) {
				t.Errorf("%s: %v, want %q", tt.thinking, e, tt.err)
			}
			continue
		}
		if p := mustPlan(t, body); p.omitThinking != tt.omit {
			t.Errorf("%s: omit %v", tt.thinking, p.omitThinking)
		}
	}
}

// TestStreamOmitted: with display omitted the thinking block streams no
// thinking_delta; its signature_delta, just before content_block_stop,
// seals the whole reasoning, and the message's block shows it empty.
func TestStreamOmitted(t *testing.T) {
	sig := thinkingSigner{codec: testCodec, model: "demo", omit: true}
	c := newStreamConverter("msg_1", "demo", 3, sig)
	a := newAccumulator("msg_1", "demo", sig)
	evs := c.start(engine.Event{})
	for _, ev := range []engine.Event{{Reasoning: "Let me"}, {Reasoning: " think."}, {Text: "Hi."},
		{Done: true, FinishReason: engine.FinishStop, Usage: engine.Usage{PromptTokens: 3, CompletionTokens: 4}}} {
		evs = append(evs, c.event(ev)...)
		a.add(ev)
	}
	var names []string
	var streamed string
	for _, e := range evs {
		name := e.name
		if d, ok := e.data.(ContentBlockDelta); ok {
			switch v := d.Delta.(type) {
			case SignatureDelta:
				streamed = v.Signature
				name += ":signature"
			case ThinkingDelta:
				name += ":thinking"
			case TextDelta:
				name += ":text"
			}
		}
		names = append(names, name)
	}
	want := "message_start content_block_start ping content_block_delta:signature content_block_stop " +
		"content_block_start content_block_delta:text content_block_stop message_delta message_stop"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("events\n got %s\nwant %s", got, want)
	}
	msg := a.result()
	tb, ok := msg.Content[0].(ThinkingBlock)
	if !ok || tb.Thinking != "" || tb.Signature == "" {
		t.Fatalf("thinking block %+v", msg.Content[0])
	}
	for _, s := range []string{streamed, tb.Signature} {
		if r, model, err := testCodec.open(s, ""); err != nil || r != "Let me think." || model != "demo" {
			t.Errorf("signature opens to %q (%s), %v", r, model, err)
		}
	}
}

// BenchmarkThinkingSignature: the cost of signing, sealing and checking a
// 16 KiB thinking block (about 4,000 tokens of reasoning).
func BenchmarkThinkingSignature(b *testing.B) {
	text := strings.Repeat("Let me think about this step by step. ", 16<<10/38)
	signed, sealed := testCodec.sign("qwen3", text), testCodec.seal("qwen3", text)
	for _, bb := range []struct {
		name string
		f    func()
	}{
		{"sign", func() { testCodec.sign("qwen3", text) }},
		{"seal", func() { testCodec.seal("qwen3", text) }},
		{"open signed", func() { _, _, _ = testCodec.open(signed, text) }},
		{"open sealed", func() { _, _, _ = testCodec.open(sealed, "") }},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				bb.f()
			}
		})
	}
}
