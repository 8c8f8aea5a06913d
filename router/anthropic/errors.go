package anthropic

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"fusion/engine"
	"fusion/engine/prompt"
	"fusion/engine/sample"
	"fusion/router/wire"
)

// Error types, as Anthropic names them in error.type.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypePermission     = "permission_error"
	TypeNotFound       = "not_found_error"
	TypeTooLarge       = "request_too_large"
	TypeRateLimit      = "rate_limit_error"
	TypeAPI            = "api_error"
	TypeOverloaded     = "overloaded_error"
)

// StatusOverloaded is the status Anthropic answers overloaded_error with.
const StatusOverloaded = 529

// Error is an API error in Anthropic's shape:
//
//	{"type": "error", "error": {"type": "...", "message": "..."}}
//
// Status is the HTTP status; RetryAfter, when positive, becomes a
// Retry-After header (seconds).
type Error struct {
	Status     int
	Type       string
	Message    string
	RetryAfter int
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message) }

// ErrorBody is the JSON of an error answer and of an "error" stream event.
type ErrorBody struct {
	Type  string      `json:"type"` // "error"
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is ErrorBody.Error.
type ErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

func (e *Error) body() ErrorBody {
	return ErrorBody{Type: "error", Error: ErrorDetail{Type: e.Type, Message: e.Message}}
}

// WriteError answers err in Anthropic's shape; errors that are not *Error
// are mapped with FromEngine first.
func WriteError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = FromEngine(err)
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	writeJSON(w, e.Status, e.body())
}

// writeJSON writes v as the whole JSON answer.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := wire.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = wire.Marshal((&Error{Type: TypeAPI, Message: "internal error: cannot encode the response"}).body())
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// invalid is a 400 invalid_request_error.
func invalid(format string, a ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Message: fmt.Sprintf(format, a...)}
}

func invalidType(param, want, got string) *Error {
	return invalid("%s: Input should be %s, but got %s.", param, want, got)
}

func missing(param string) *Error { return invalid("%s: Field required", param) }

// Unauthorized is the 401 of a missing or wrong API key.
func Unauthorized(msg string) *Error {
	return &Error{Status: http.StatusUnauthorized, Type: TypeAuthentication, Message: msg}
}

// TooLarge is the 413 of a body over the limit.
func TooLarge(limit int64) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Type: TypeTooLarge,
		Message: fmt.Sprintf("Request exceeds the maximum allowed number of bytes (%d).", limit)}
}

// RouteNotFound is the 404 of an unknown path.
func RouteNotFound(method, path string) *Error {
	return &Error{Status: http.StatusNotFound, Type: TypeNotFound, Message: fmt.Sprintf("Not found: %s %s", method, path)}
}

// MethodNotAllowed is the 405 of a known path with another method.
func MethodNotAllowed(method, path string) *Error {
	return &Error{Status: http.StatusMethodNotAllowed, Type: TypeInvalidRequest, Message: fmt.Sprintf("Method %s is not allowed on %s.", method, path)}
}

// Wants reports whether an answer to r that no route produced (404, 405,
// 413 before routing) should take Anthropic's shape: its path is under
// /v1/messages or /v1/count_tokens, or it carries anthropic-version.
func Wants(r *http.Request) bool {
	p := r.URL.Path
	return p == "/v1/messages" || strings.HasPrefix(p, "/v1/messages/") || p == "/v1/count_tokens" ||
		r.Header.Get("anthropic-version") != ""
}

// ModelNotFound is the 404 of an unknown model.
func ModelNotFound(model string) *Error {
	return &Error{Status: http.StatusNotFound, Type: TypeNotFound, Message: fmt.Sprintf("model: %s", model)}
}

// FromEngine maps an engine error: unknown model 404 not_found_error, full
// queue 429 rate_limit_error (Retry-After: the engine's hint, at least 1), a model that cannot be loaded
// now 529 overloaded_error (Anthropic's status for a temporarily
// overloaded service; Retry-After 5), a request the model cannot take 400;
// anything else 500 api_error.
func FromEngine(err error) *Error {
	var (
		e  *Error
		pe *sample.ParamError
		ie *prompt.InvalidRequestError
		ue *engine.UpstreamError
	)
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, engine.ErrModelNotFound):
		return &Error{Status: http.StatusNotFound, Type: TypeNotFound, Message: err.Error()}
	case errors.Is(err, engine.ErrOverloaded):
		return &Error{Status: http.StatusTooManyRequests, Type: TypeRateLimit, RetryAfter: engine.RetryAfterSeconds(err, 1),
			Message: "The server is overloaded: " + err.Error() + ". Retry shortly."}
	case errors.Is(err, engine.ErrUnavailable):
		return &Error{Status: StatusOverloaded, Type: TypeOverloaded, RetryAfter: 5, Message: "Overloaded: " + err.Error()}
	case errors.As(err, &ue):
		// An upstream provider's refusal (backend_override "cloud"): its
		// status and message, in this dialect's shape.
		return &Error{Status: ue.Status, Type: upstreamType(ue.Status), Message: ue.Error()}
	case errors.Is(err, engine.ErrUpstream):
		return &Error{Status: http.StatusBadGateway, Type: TypeAPI, Message: err.Error()}
	case errors.As(err, &pe):
		return invalid("%s", pe.Error())
	case errors.Is(err, sample.ErrInvalidParams):
		return invalid("%s", err.Error())
	case errors.As(err, &ie):
		return invalid("%s", err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &Error{Status: 499, Type: TypeInvalidRequest, Message: "the request was cancelled"}
	}
	return &Error{Status: http.StatusInternalServerError, Type: TypeAPI, Message: "internal error: " + err.Error()}
}

// keyUnavailable answers a request while the key that signs thinking
// blocks cannot be had (a cluster member that has never reached a leader,
// when the cluster has no secret): retry shortly.
func keyUnavailable(err error) *Error {
	return &Error{Status: StatusOverloaded, Type: TypeOverloaded, RetryAfter: 1,
		Message: "Overloaded: the key that signs thinking blocks is not available yet: " + err.Error()}
}

// engineError maps an engine error, naming the model on a 404.
func engineError(err error, model string) *Error {
	if errors.Is(err, engine.ErrModelNotFound) {
		return ModelNotFound(model)
	}
	return FromEngine(err)
}

// engineError maps an engine error of p's generation (engineError): the
// engine's refusal of a schema it cannot enforce names OpenAI's
// response_format, here the field the format came in.
func (p *plan) engineError(err error, model string) *Error {
	e := engineError(err, model)
	if p.formatParam == "" || e.Status != http.StatusBadRequest {
		return e
	}
	if rest, ok := strings.CutPrefix(e.Message, "response_format: "); ok {
		return &Error{Status: e.Status, Type: e.Type, Message: p.formatParam + ".schema: " + rest}
	}
	return e
}

// upstreamType is the Messages API's error type of an upstream's 4xx.
func upstreamType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return TypeAuthentication
	case http.StatusForbidden:
		return TypePermission
	case http.StatusNotFound:
		return TypeNotFound
	case http.StatusRequestEntityTooLarge:
		return TypeTooLarge
	case http.StatusTooManyRequests:
		return TypeRateLimit
	}
	return TypeInvalidRequest
}
