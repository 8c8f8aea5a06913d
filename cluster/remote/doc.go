// Package remote is the data plane between nodes: a gRPC Engine service
// that serves any engine.Generator to peers, and a client that implements
// engine.Generator against one peer. Requests and events cross the wire in
// their neutral form (engine.Request in, engine.Event out), so every HTTP
// dialect is written once and forwarding never re-proxies HTTP.
//
// Errors keep their type across the wire: a refusal on the peer comes back
// as the same engine sentinel (ErrModelNotFound, ErrOverloaded,
// ErrUnavailable) or *prompt.InvalidRequestError / *sample.ParamError, with
// the peer's message, so the frontend answers the same status as a local
// engine would. A peer that cannot be reached is engine.ErrUnavailable.
//
// Cancelling the context of a client call cancels the RPC, whose server
// side cancels the generation on the peer.
package remote
