package openai

import (
	"fusion/router/wire"
	"net/http"
)

// sseWriter writes server-sent events, flushing each.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

// start writes the headers of an event stream.
func (s *sseWriter) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
}

// data writes one "data: JSON" event.
func (s *sseWriter) data(v any) error {
	b, err := wire.Marshal(v)
	if err != nil {
		return err
	}
	return s.raw(b)
}

func (s *sseWriter) raw(b []byte) error {
	s.start()
	buf := make([]byte, 0, len(b)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	buf = append(buf, '\n', '\n')
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

// done writes the closing "data: [DONE]".
func (s *sseWriter) done() error { return s.raw([]byte("[DONE]")) }

// fail writes an error event, as OpenAI does when a stream breaks.
func (s *sseWriter) fail(e *Error) error { return s.data(e.body()) }
