package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"fusion/cluster/enginepb"
	"fusion/engine"
	"fusion/engine/prompt"
	"fusion/engine/sample"
)

// RetryAfterer is implemented by errors that carry a retry hint.
type RetryAfterer interface{ RetryAfter() time.Duration }

// PeerError is an error a peer's engine returned: its message is the
// peer's, and it unwraps to the typed error callers branch on.
type PeerError struct {
	Msg   string
	Err   error         // the typed error (a sentinel, or a struct)
	Retry time.Duration // retry hint, 0 none
}

func (e *PeerError) Error() string             { return e.Msg }
func (e *PeerError) Unwrap() error             { return e.Err }
func (e *PeerError) RetryAfter() time.Duration { return e.Retry }

// UnreachableError is a peer that could not be reached or broke the call.
// It unwraps to engine.ErrUnavailable (a 503; the dispatcher may retry
// another peer when nothing was sent yet).
type UnreachableError struct {
	Addr string
	Err  error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("peer %s unreachable: %v", e.Addr, e.Err)
}

// Unwrap gives both engine.ErrUnavailable and the transport error.
func (e *UnreachableError) Unwrap() []error { return []error{engine.ErrUnavailable, e.Err} }

// errorToPB types err for the wire.
func errorToPB(err error) *enginepb.Error {
	var (
		pe *sample.ParamError
		ie *prompt.InvalidRequestError
		ra RetryAfterer
	)
	e := &enginepb.Error{Message: err.Error()}
	switch {
	case errors.As(err, &pe):
		e.Code, e.Param = enginepb.Error_INVALID_PARAM, pe.Param
		e.Message = pe.Msg
	case errors.As(err, &ie), errors.Is(err, sample.ErrInvalidParams):
		e.Code = enginepb.Error_INVALID_REQUEST
	case errors.Is(err, engine.ErrModelNotFound):
		e.Code = enginepb.Error_MODEL_NOT_FOUND
	case errors.Is(err, engine.ErrOverloaded):
		e.Code = enginepb.Error_OVERLOADED
	case errors.Is(err, engine.ErrUnavailable):
		e.Code = enginepb.Error_UNAVAILABLE
	case errors.Is(err, context.Canceled):
		e.Code = enginepb.Error_CANCELLED
	case errors.Is(err, context.DeadlineExceeded):
		e.Code = enginepb.Error_DEADLINE
	}
	if errors.As(err, &ra) {
		e.RetryAfterMs = ra.RetryAfter().Milliseconds()
	}
	return e
}

// errorFromPB is the inverse of errorToPB.
func errorFromPB(e *enginepb.Error) error {
	pe := &PeerError{Msg: e.GetMessage(), Retry: time.Duration(e.GetRetryAfterMs()) * time.Millisecond}
	switch e.GetCode() {
	case enginepb.Error_INVALID_PARAM:
		// A *sample.ParamError inside an *InvalidRequestError, as the
		// runner returns it.
		return &prompt.InvalidRequestError{Err: &sample.ParamError{Param: e.GetParam(), Msg: e.GetMessage()}}
	case enginepb.Error_INVALID_REQUEST:
		return &prompt.InvalidRequestError{Err: errors.New(e.GetMessage())}
	case enginepb.Error_MODEL_NOT_FOUND:
		pe.Err = engine.ErrModelNotFound
	case enginepb.Error_OVERLOADED:
		pe.Err = engine.ErrOverloaded
	case enginepb.Error_UNAVAILABLE:
		pe.Err = engine.ErrUnavailable
	case enginepb.Error_CANCELLED:
		pe.Err = context.Canceled
	case enginepb.Error_DEADLINE:
		pe.Err = context.DeadlineExceeded
	default:
		pe.Err = errInternal
	}
	return pe
}

// errInternal is what an untyped error of the peer unwraps to.
var errInternal = errors.New("internal error on the peer")

// statusOf turns an engine error into a gRPC status carrying its type.
func statusOf(err error) error {
	e := errorToPB(err)
	code := codes.Internal
	switch e.Code {
	case enginepb.Error_INVALID_PARAM, enginepb.Error_INVALID_REQUEST:
		code = codes.InvalidArgument
	case enginepb.Error_MODEL_NOT_FOUND:
		code = codes.NotFound
	case enginepb.Error_OVERLOADED:
		code = codes.ResourceExhausted
	case enginepb.Error_UNAVAILABLE:
		code = codes.Unavailable
	case enginepb.Error_CANCELLED:
		code = codes.Canceled
	case enginepb.Error_DEADLINE:
		code = codes.DeadlineExceeded
	}
	st, derr := status.New(code, e.Message).WithDetails(e)
	if derr != nil {
		return status.Error(code, e.Message)
	}
	return st.Err()
}

// fromCall maps the error of an RPC: a typed engine error when the peer
// sent one, the caller's own context error when it gave up, else the peer
// is unreachable.
func fromCall(ctx context.Context, addr string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, io.EOF) {
		return &UnreachableError{Addr: addr, Err: errors.New("the call ended before an answer")}
	}
	st, ok := status.FromError(err)
	if ok {
		for _, d := range st.Details() {
			if e, ok := d.(*enginepb.Error); ok {
				return errorFromPB(e)
			}
		}
	}
	return &UnreachableError{Addr: addr, Err: err}
}
