package engine

import (
	"context"
	"time"
)

// Phase names a stage of one generation, as Phases hears it.
type Phase string

// The phases of a generation, in order.
const (
	PhaseQueue   Phase = "queue_wait" // admitted, waiting for a place in a running batch
	PhasePrefill Phase = "prefill"    // running, up to its first sampled token
	PhaseDecode  Phase = "decode"     // from the first token to the last
)

// Phases hears when the phases of a generation ran. A request's context
// carries one (WithPhases) when someone wants them (tracing); the engine
// calls it once per phase after the generation ended normally, from its
// scheduler: it must not block. Without one the engine does nothing more.
type Phases interface {
	Phase(p Phase, start, end time.Time)
}

// Traced is implemented by Phases that belong to a distributed trace:
// TraceParent is the W3C traceparent of the span the phases go under. The
// engine hands it to the later stages of a sharded model, whose spans of
// the sequence join the request's trace.
type Traced interface {
	TraceParent() string
}

type phasesKey struct{}

// WithPhases returns ctx carrying p.
func WithPhases(ctx context.Context, p Phases) context.Context {
	return context.WithValue(ctx, phasesKey{}, p)
}

// PhasesFrom returns the Phases ctx carries (nil: none).
func PhasesFrom(ctx context.Context) Phases {
	p, _ := ctx.Value(phasesKey{}).(Phases)
	return p
}
