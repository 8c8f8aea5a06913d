package host

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// tailWriter logs a stdio server's stderr line by line and keeps its last
// bytes for the failure message.
type tailWriter struct {
	mu      sync.Mutex
	max     int
	tail    []byte
	partial []byte
	log     *slog.Logger
	redact  func(string) string
}

func newTailWriter(max int, log *slog.Logger, redact func(string) string) *tailWriter {
	return &tailWriter{max: max, log: log, redact: redact}
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tail = append(w.tail, p...)
	if over := len(w.tail) - w.max; over > 0 {
		w.tail = append(w.tail[:0], w.tail[over:]...)
	}
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.log.Info("mcp server stderr", "line", w.redact(string(bytes.TrimRight(w.partial[:i], "\r"))))
		w.partial = w.partial[i+1:]
	}
	if len(w.partial) > w.max { // a very long line: log what we have
		w.log.Info("mcp server stderr", "line", w.redact(string(w.partial)))
		w.partial = w.partial[:0]
	}
	return len(p), nil
}

// Tail is the last bytes written, trimmed, on one line.
func (w *tailWriter) Tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.redact(strings.Join(strings.Fields(strings.ToValidUTF8(string(w.tail), "")), " "))
}

// headerTransport adds the configured headers to every request.
type headerTransport struct {
	headers map[string]string
	base    http.RoundTripper
}

func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.headers {
		r.Header.Set(k, v)
	}
	return t.base.RoundTrip(r)
}

func headerClient(headers map[string]string) *http.Client {
	if len(headers) == 0 {
		return &http.Client{}
	}
	return &http.Client{Transport: &headerTransport{headers: headers, base: http.DefaultTransport}}
}

// compileSchema compiles a tool's input schema (as the SDK decoded it).
func compileSchema(schema any) (*jsonschema.Schema, error) {
	if schema == nil {
		return nil, nil
	}
	doc := toJSONValue(schema)
	c := jsonschema.NewCompiler()
	if err := c.AddResource("tool.json", doc); err != nil {
		return nil, err
	}
	return c.Compile("tool.json")
}

// toJSONValue turns v into what the schema library validates: the
// result of decoding its JSON with numbers kept exact.
func toJSONValue(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	out, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return v
	}
	return out
}

// argumentError names the first field a validation error is about.
func argumentError(err error) error {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &ArgumentError{Path: "arguments", Msg: err.Error()}
	}
	leaf := ve
	for len(leaf.Causes) > 0 {
		leaf = leaf.Causes[0]
	}
	loc := append([]string{"arguments"}, leaf.InstanceLocation...)
	if req, ok := leaf.ErrorKind.(*kind.Required); ok && len(req.Missing) > 0 {
		loc = append(loc, req.Missing[0])
		return &ArgumentError{Path: strings.Join(loc, "."), Msg: "required field is missing"}
	}
	return &ArgumentError{Path: strings.Join(loc, "."), Msg: leaf.ErrorKind.LocalizedString(message.NewPrinter(language.English))}
}
