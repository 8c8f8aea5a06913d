package pipeline

import (
	"fmt"
	"time"
)

// StartSpan starts a stage's span of one sequence as the child of the span
// whose W3C traceparent the stage before sent, with string attributes. It
// returns the new span's own traceparent, which goes on to the next stage,
// and the function that ends the span with its counters. internal/tracing's
// Tracer.StartRemoteChild is one.
type StartSpan func(parent, name string, attrs map[string]string) (traceparent string, end func(counts map[string]int64))

// TraceWith has the server record a span per traced sequence on each of
// its stages: from the sequence's first step to its release, with the
// steps, positions and forward time it took there. Call it before the
// gRPC server serves.
func (s *Server) TraceWith(start StartSpan) { s.startSpan = start }

// seqSpan is a traced sequence's span on this stage.
type seqSpan struct {
	traceparent string // the span's own, for the next stage
	end         func(map[string]int64)
	steps       int64
	positions   int64
	forward     time.Duration
}

// startSeqSpan starts the span of a sequence whose first step carried
// parent (nil when untraced or tracing is off).
func (s *Server) startSeqSpan(parent string, st Stage, name string) *seqSpan {
	if s.startSpan == nil || parent == "" {
		return nil
	}
	tp, end := s.startSpan(parent, "pipeline stage", map[string]string{
		"fusion.model":               name,
		"fusion.pipeline.generation": fmt.Sprint(st.Generation),
		"fusion.pipeline.last":       fmt.Sprint(st.Next == ""),
	})
	if end == nil {
		return nil
	}
	return &seqSpan{traceparent: tp, end: end}
}

// finish ends the span (nil: nothing).
func (sp *seqSpan) finish() {
	if sp == nil {
		return
	}
	sp.end(map[string]int64{
		"fusion.pipeline.steps":      sp.steps,
		"fusion.pipeline.positions":  sp.positions,
		"fusion.pipeline.forward_ms": sp.forward.Milliseconds(),
	})
}
