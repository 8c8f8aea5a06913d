package anthropic

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"fusion/engine"
	"fusion/engine/prompt"
)

// fakeEngine answers every request with the given events.
type fakeEngine struct {
	events []engine.Event
	err    error
}

func (f *fakeEngine) Generate(ctx context.Context, req *engine.Request) (<-chan engine.Event, error) {
	if f.err != nil {
		return nil, f.err
	}
	ch := make(chan engine.Event, len(f.events))
	for _, ev := range f.events {
		ch <- ev
	}
	close(ch)
	return ch, nil
}
func (f *fakeEngine) Models(context.Context) ([]engine.ModelInfo, error) { return nil, nil }
func (f *fakeEngine) Tokenize(context.Context, string, prompt.Request) (prompt.Result, error) {
	return prompt.Result{Count: 7}, f.err
}
func (f *fakeEngine) Detokenize(context.Context, string, []int) (string, error) { return "", nil }

func serve(t *testing.T, f *fakeEngine, body string) *httptest.ResponseRecorder {
	t.Helper()
	h := New(Config{Engine: f})
	w := httptest.NewRecorder()
	h.messages(w, httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(body)))
	return w
}

const streamBody = `{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}`

func TestStreamErrorMidway(t *testing.T) {
	w := serve(t, &fakeEngine{events: []engine.Event{{Text: "a"}, {Err: errors.New("boom")}}}, streamBody)
	got := w.Body.String()
	if w.Code != 200 || !strings.HasSuffix(got, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"internal error: boom\"}}\n\n") ||
		!strings.Contains(got, `"text":"a"`) {
		t.Errorf("%d %s", w.Code, got)
	}
}

func TestStreamErrorFirst(t *testing.T) {
	w := serve(t, &fakeEngine{events: []engine.Event{{Err: &prompt.InvalidRequestError{Err: errors.New("prompt too long")}}}}, streamBody)
	if w.Code != 400 || !strings.Contains(w.Body.String(), `"type":"invalid_request_error"`) {
		t.Errorf("%d %s", w.Code, w.Body.String())
	}
}

func TestUnavailable(t *testing.T) {
	w := serve(t, &fakeEngine{err: engine.ErrUnavailable}, strings.Replace(streamBody, `"stream":true`, `"stream":false`, 1))
	if w.Code != 529 || w.Header().Get("Retry-After") != "5" || !strings.Contains(w.Body.String(), `"type":"overloaded_error"`) {
		t.Errorf("%d %s", w.Code, w.Body.String())
	}
}
