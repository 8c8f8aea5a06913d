package cloud

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"fusion/engine"
	"fusion/engine/prompt"
)

// Options configure a Client.
type Options struct {
	// HTTP is the client upstream calls use (nil: one with its own
	// transport; timeouts come from each upstream's setting).
	HTTP    *http.Client
	Secrets Secrets
	Logger  *slog.Logger
	// MaxEventBytes bounds one line of an upstream's event stream
	// (0: 4 MiB).
	MaxEventBytes int
}

// Client sends neutral requests to the configured upstreams. It is safe
// for concurrent use; SetConfig swaps the configuration while requests
// run (those in flight keep the upstream they started with).
type Client struct {
	opts Options
	cfg  atomic.Pointer[Config]
}

// New returns a client with an empty configuration.
func New(o Options) *Client {
	if o.HTTP == nil {
		o.HTTP = &http.Client{Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout: 10 * time.Second,
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     90 * time.Second,
			ForceAttemptHTTP2:   true,
		}}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxEventBytes <= 0 {
		o.MaxEventBytes = 4 << 20
	}
	c := &Client{opts: o}
	c.cfg.Store(&Config{})
	return c
}

// SetConfig puts cfg in force (it must be valid).
func (c *Client) SetConfig(cfg Config) { c.cfg.Store(&cfg) }

// Config is the configuration in force.
func (c *Client) Config() Config { return *c.cfg.Load() }

// Serves reports whether an upstream serves model.
func (c *Client) Serves(model string) bool {
	_, ok := c.cfg.Load().Route(model)
	return ok
}

// KeyStatus reports, per upstream name, whether this node can read its
// key (nil error) or why not — never the key.
func (c *Client) KeyStatus() map[string]error {
	out := map[string]error{}
	for _, u := range c.cfg.Load().Upstreams {
		_, err := c.opts.Secrets.Key(u)
		out[u.Name] = err
	}
	return out
}

// ErrNoUpstream: no upstream is configured for the request's model.
var ErrNoUpstream = errors.New("no cloud upstream is configured for the model")

// Generate sends req to the upstream that serves its model and returns
// the answer as neutral events (streamed as they arrive; always the
// upstream's streaming API). Errors before the first event: an unknown
// model or a request the cloud cannot take (*prompt.InvalidRequestError,
// 400), the upstream unreachable or failing (engine.ErrUpstream, 502),
// its refusal (*engine.UpstreamError, its 4xx), the key not readable
// here (engine.ErrUpstream).
func (c *Client) Generate(ctx context.Context, req *engine.Request) (<-chan engine.Event, error) {
	rt, ok := c.cfg.Load().Route(req.Model)
	if !ok {
		return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("backend_override %q: %w %q (configure one in /admin/api/cloud)", engine.BackendCloud, ErrNoUpstream, req.Model)}
	}
	if req.Messages == nil {
		return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("backend_override %q takes chat requests (messages), not a raw prompt", engine.BackendCloud)}
	}
	u := rt.Upstream
	key, err := c.opts.Secrets.Key(u)
	if err != nil {
		return nil, fmt.Errorf("%w: upstream %q: %w", engine.ErrUpstream, u.Name, err)
	}
	var (
		body []byte
		path string
	)
	switch u.Kind {
	case KindAnthropic:
		body, err = anthropicBody(req, rt.Model)
		path = "/messages"
	default:
		body, err = openAIBody(req, rt.Model)
		path = "/chat/completions"
	}
	if err != nil {
		return nil, err
	}
	parent := ctx // the client's: its end stops the call
	ctx, cancel := context.WithCancel(ctx)
	// One timer bounds the wait for the answer to start and every
	// silence after: each line read resets it.
	timer := time.AfterFunc(u.Timeout(), cancel)
	timedOut := func() bool { return !timer.Stop() }
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(u.BaseURL, "/")+path, bytes.NewReader(body))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("%w: upstream %q: %v", engine.ErrUpstream, u.Name, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	if u.Kind == KindAnthropic {
		hreq.Header.Set("anthropic-version", "2023-06-01")
		if key != "" {
			hreq.Header.Set("x-api-key", key)
		}
	} else if key != "" {
		hreq.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.opts.HTTP.Do(hreq)
	if err != nil {
		cancel()
		reason := redact(err.Error(), key)
		if timedOut() {
			reason = fmt.Sprintf("no answer within %v", u.Timeout())
		} else if parent.Err() != nil {
			return nil, err // the client went away
		}
		c.opts.Logger.Warn("cloud upstream unreachable", "upstream", u.Name, "url", u.BaseURL, "err", reason)
		return nil, fmt.Errorf("%w: upstream %q (%s) unreachable: %s", engine.ErrUpstream, u.Name, u.BaseURL, reason)
	}
	if resp.StatusCode/100 != 2 {
		defer cancel()
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		typ, msg := errorMessage(raw)
		msg = redact(msg, key)
		c.opts.Logger.Warn("cloud upstream refused", "upstream", u.Name, "status", resp.StatusCode, "message", msg)
		if resp.StatusCode >= 400 && resp.StatusCode < 500 {
			return nil, &engine.UpstreamError{Upstream: u.Name, Status: resp.StatusCode, Type: typ, Message: msg}
		}
		return nil, fmt.Errorf("%w: upstream %q answered %d: %s", engine.ErrUpstream, u.Name, resp.StatusCode, msg)
	}
	timer.Reset(u.Timeout())
	out := make(chan engine.Event, 16)
	go func() {
		defer close(out)
		defer timer.Stop()
		defer cancel()
		defer resp.Body.Close()
		var dec decoder = &openAIDecoder{}
		if u.Kind == KindAnthropic {
			dec = &anthropicDecoder{}
		}
		err := c.read(resp.Body, dec, timer, u.Timeout(), func(ev engine.Event) bool {
			select {
			case out <- ev:
				return true
			case <-parent.Done():
				return false
			}
		})
		if err == nil {
			return
		}
		if timedOut() || errors.Is(err, errTimeout) {
			err = fmt.Errorf("%w: upstream %q went silent for %v", engine.ErrUpstream, u.Name, u.Timeout())
		} else if parent.Err() != nil {
			return // the client went away
		} else if !errors.Is(err, engine.ErrUpstream) {
			err = fmt.Errorf("%w: upstream %q: %s", engine.ErrUpstream, u.Name, redact(err.Error(), key))
		}
		select {
		case out <- engine.Event{Err: err}:
		case <-parent.Done():
		}
	}()
	return out, nil
}

var errTimeout = errors.New("upstream silent")

// decoder turns an upstream's server-sent events into neutral events.
type decoder interface {
	// event handles one event (its "event:" name, maybe empty, and its
	// data) and returns the neutral events it completes; done reports
	// the end of the answer.
	event(name string, data []byte) (evs []engine.Event, done bool, err error)
	// end is called when the stream ends without done: the last events
	// if the answer is complete, else an error.
	end() ([]engine.Event, error)
}

// read feeds the server-sent events of r to dec and each neutral event to
// send, resetting timer on every line.
func (c *Client) read(r io.Reader, dec decoder, timer *time.Timer, timeout time.Duration, send func(engine.Event) bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), c.opts.MaxEventBytes)
	var (
		name string
		data bytes.Buffer
	)
	flush := func() (bool, error) {
		if data.Len() == 0 {
			name = ""
			return false, nil
		}
		evs, done, err := dec.event(name, data.Bytes())
		name = ""
		data.Reset()
		if err != nil {
			return false, err
		}
		for _, ev := range evs {
			if !send(ev) {
				return true, nil
			}
		}
		return done, nil
	}
	for sc.Scan() {
		if !timer.Reset(timeout) {
			return errTimeout
		}
		line := sc.Text()
		switch {
		case line == "":
			if done, err := flush(); done || err != nil {
				return err
			}
		case strings.HasPrefix(line, ":"): // a comment (keep-alive)
		case strings.HasPrefix(line, "event:"):
			name = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if done, err := flush(); done || err != nil {
		return err
	}
	evs, err := dec.end()
	if err != nil {
		return err
	}
	for _, ev := range evs {
		if !send(ev) {
			break
		}
	}
	return nil
}

// errorMessage reads an error body of either API: {"error": {"type",
// "message"}} (OpenAI, Anthropic's inner object), else the text.
func errorMessage(raw []byte) (typ, msg string) {
	var b struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(raw, &b) == nil && len(b.Error) > 0 {
		var e struct{ Type, Message string }
		if json.Unmarshal(b.Error, &e) == nil && e.Message != "" {
			return e.Type, e.Message
		}
		var s string
		if json.Unmarshal(b.Error, &s) == nil && s != "" {
			return "", s
		}
	}
	s := strings.TrimSpace(string(raw))
	if len(s) > 512 {
		s = s[:512] + "…"
	}
	if s == "" {
		s = "(no message)"
	}
	return "", s
}

// redact removes key from s: a provider may echo a key it refused.
func redact(s, key string) string {
	if len(key) < 4 {
		return s
	}
	return strings.ReplaceAll(s, key, "[redacted]")
}
