package openai

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"fusion/engine"
	"fusion/engine/prompt"
	"fusion/engine/sample"
	"fusion/router/wire"
)

// Error types, as OpenAI names them in error.type.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeRateLimit      = "rate_limit_error"
	TypeServer         = "server_error"
	TypeUnavailable    = "service_unavailable"
)

// Error is an API error in the OpenAI shape:
//
//	{"error": {"message": "...", "type": "...", "param": "...", "code": "..."}}
//
// Status is the HTTP status it is answered with; RetryAfter, when positive,
// becomes a Retry-After header (seconds).
type Error struct {
	Status     int
	Message    string
	Type       string
	Param      string // "" is written as null
	Code       string // "" is written as null
	RetryAfter int
}

func (e *Error) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("%d %s (%s): %s", e.Status, e.Type, e.Param, e.Message)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message)
}

// errorBody is the JSON of an error answer.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (e *Error) body() errorBody {
	return errorBody{errorDetail{Message: e.Message, Type: e.Type, Param: nullable(e.Param), Code: nullable(e.Code)}}
}

// WriteError answers err in the OpenAI shape. Errors that are not *Error
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
		// Our own response types always marshal; this is a bug.
		status = http.StatusInternalServerError
		b, _ = wire.Marshal(errorBody{errorDetail{Message: "internal error: cannot encode the response", Type: TypeServer}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// Constructors for the errors the handlers answer.

func invalidRequest(param, format string, a ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: param, Code: "invalid_value", Message: fmt.Sprintf(format, a...)}
}

func invalidType(param, want, got string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: param, Code: "invalid_type",
		Message: fmt.Sprintf("Invalid type for '%s': expected %s, but got %s instead.", param, want, got)}
}

func missingParam(param string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: param, Code: "missing_required_parameter",
		Message: fmt.Sprintf("Missing required parameter: '%s'.", param)}
}

func unsupported(param, format string, a ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: param, Code: "unsupported_parameter", Message: fmt.Sprintf(format, a...)}
}

// ModelNotFound is the 404 of an unknown model.
func ModelNotFound(model string) *Error {
	return &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf("The model '%s' does not exist.", model)}
}

// Unauthorized is the 401 of a missing or wrong API key.
func Unauthorized(msg string) *Error {
	return &Error{Status: http.StatusUnauthorized, Type: TypeInvalidRequest, Code: "invalid_api_key", Message: msg}
}

// NotFound is the 404 of an unknown path.
func NotFound(method, path string) *Error {
	return &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Code: "unknown_url",
		Message: fmt.Sprintf("Invalid URL (%s %s)", method, path)}
}

// MethodNotAllowed is the 405 of a known path called with the wrong method.
func MethodNotAllowed(method, path string) *Error {
	return &Error{Status: http.StatusMethodNotAllowed, Type: TypeInvalidRequest, Code: "method_not_allowed",
		Message: fmt.Sprintf("Invalid method for URL (%s %s)", method, path)}
}

// TooLarge is the 413 of a body over the limit.
func TooLarge(limit int64) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Type: TypeInvalidRequest, Code: "request_too_large",
		Message: fmt.Sprintf("The request body is larger than this server's limit of %d bytes.", limit)}
}

// Internal is the 500 answered for a bug (a recovered panic).
func Internal() *Error {
	return &Error{Status: http.StatusInternalServerError, Type: TypeServer, Code: "internal_error",
		Message: "The server had an error while processing your request."}
}

// FromEngine maps an error of the engine to the answer a client gets:
// unknown model 404, full queue 429, model that cannot load 503, a request
// the model cannot take 400; anything else is the server's fault (500).
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
		return &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Param: "model", Code: "model_not_found", Message: err.Error()}
	case errors.Is(err, engine.ErrOverloaded):
		return &Error{Status: http.StatusTooManyRequests, Type: TypeRateLimit, Code: "rate_limit_exceeded", RetryAfter: engine.RetryAfterSeconds(err, 1),
			Message: "The server is overloaded: " + err.Error() + ". Retry shortly."}
	case errors.Is(err, engine.ErrUnavailable):
		return &Error{Status: http.StatusServiceUnavailable, Type: TypeUnavailable, Code: "model_unavailable", RetryAfter: 5, Message: err.Error()}
	case errors.As(err, &ue):
		// An upstream provider's refusal (backend_override "cloud"): its
		// status and message, in this dialect's shape.
		typ := TypeInvalidRequest
		if ue.Status == http.StatusTooManyRequests {
			typ = TypeRateLimit
		}
		return &Error{Status: ue.Status, Type: typ, Code: "upstream_error", Message: ue.Error()}
	case errors.Is(err, engine.ErrUpstream):
		return &Error{Status: http.StatusBadGateway, Type: TypeServer, Code: "upstream_error", Message: err.Error()}
	case errors.As(err, &pe):
		return invalidRequest(pe.Param, "%s", pe.Error())
	case errors.Is(err, sample.ErrInvalidParams):
		return invalidRequest("", "%s", err.Error())
	case errors.As(err, &ie):
		return invalidRequest("", "%s", err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client went away; nobody reads this answer.
		return &Error{Status: statusClientClosed, Type: TypeInvalidRequest, Code: "cancelled", Message: "the request was cancelled"}
	}
	return &Error{Status: http.StatusInternalServerError, Type: TypeServer, Code: "internal_error", Message: "internal error: " + err.Error()}
}

// statusClientClosed is nginx's 499, logged for requests whose client went
// away before the answer.
const statusClientClosed = 499
