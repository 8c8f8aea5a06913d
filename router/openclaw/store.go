package openclaw

import (
	"context"
	"encoding/json"
	"errors"
	"fusion/router/openai"
	"time"
)

// Session is one agent session as a store holds it. Stores hand out
// copies: changing a returned Session changes nothing stored.
type Session struct {
	ID    string
	Owner string // the API key id that created it ("" with the master key)
	Model string

	SystemPrompt string
	// Tools is the JSON array of tool definitions (OpenAI format), or nil.
	Tools json.RawMessage
	// History holds the conversation after the system prompt, one JSON
	// message object (OpenAI chat format) per element.
	History []json.RawMessage

	TurnCount int
	// Active is set while a turn runs (between BeginTurn and EndTurn).
	Active bool

	// Timestamps come from the store's clock (the leader's, in a cluster).
	CreatedAt  time.Time
	LastAccess time.Time
	ExpiresAt  time.Time // absolute: LastAccess + TTL
	// TurnStartedAt is when the running turn began (zero when inactive).
	TurnStartedAt time.Time
}

// Clone returns a deep copy of s.
func (s *Session) Clone() *Session {
	c := *s
	c.Tools = cloneRaw(s.Tools)
	c.History = make([]json.RawMessage, len(s.History))
	for i, m := range s.History {
		c.History[i] = cloneRaw(m)
	}
	return &c
}

func cloneRaw(b json.RawMessage) json.RawMessage {
	if b == nil {
		return nil
	}
	return append(json.RawMessage(nil), b...)
}

// NewSession is what creating a session takes.
type NewSession struct {
	// ID is chosen by the caller (random); a store refuses a duplicate
	// with ErrExists.
	ID           string
	Owner        string
	Model        string
	SystemPrompt string
	Tools        json.RawMessage
}

// EditMode says where a steering message goes.
type EditMode string

// Edit modes, as the contract names them.
const (
	EditAppend  EditMode = "append"  // at the end of the history
	EditPrepend EditMode = "prepend" // before the last user message (at the end if there is none)
	EditReplace EditMode = "replace" // in place of the last message (appended to an empty history)
)

// Valid reports whether m is one of the three modes.
func (m EditMode) Valid() bool { return m == EditAppend || m == EditPrepend || m == EditReplace }

// Edit changes the history of a session outside a turn: a steering
// message, or the result of a tool call.
type Edit struct {
	Mode    EditMode
	Message json.RawMessage
	// ToolCallID, when set, makes the edit a tool result: the store
	// checks, atomically with the edit, that an assistant message of the
	// history called that id and that no tool message answered it yet
	// (else ErrUnknownToolCall or ErrToolCallAnswered).
	ToolCallID string
}

// TurnEnd is the outcome of a turn.
type TurnEnd struct {
	// Turn is the turn number BeginTurn returned (TurnCount+1 at the
	// start); an EndTurn for another turn is refused with ErrConflict.
	Turn int
	// Messages are appended to the history: the turn's input, then the
	// assistant's answer. Ignored when Failed.
	Messages []json.RawMessage
	// Failed ends a turn that produced nothing: the session becomes
	// inactive, the history and turn count stay as they were.
	Failed bool
	// Result is the turn's answer as the client got it (for the event
	// stream); stores pass it through untouched, or drop it (the stream
	// then rebuilds it from Messages, without usage).
	Result json.RawMessage
}

// ChangeKind says what a change did.
type ChangeKind int

// Kinds of change.
const (
	Created   ChangeKind = iota
	Touched              // TTL renewed by a read
	TurnBegan            // a turn started (Session.Active is set)
	TurnEnded            // a turn ended (TurnEnd set)
	Edited               // a steering message or tool result (Edit set)
	Closed               // the session is gone (Reason set)
	// MCPStepped: an MCP call the server runs during a turn started or
	// ended (Step set). Not a store change: the node running the turn
	// hands it to its own streams as it happens.
	MCPStepped
)

// Reasons a session closes.
const (
	ReasonDeleted = "deleted" // DELETE by a client
	ReasonExpired = "expired" // TTL ran out
	ReasonEvicted = "evicted" // least recently used at the cap
)

// Change is one event of a store, delivered after it took effect.
type Change struct {
	Kind ChangeKind
	// Session is the state after the change (before it, for Closed).
	Session *Session
	TurnEnd *TurnEnd // TurnEnded
	Edit    *Edit    // Edited
	Reason  string   // Closed
	Step    *MCPStep // MCPStepped
}

// MCPStep is one step of a server-run MCP call: its start (Call.Status
// "in_progress") or its result ("completed" or "failed").
type MCPStep struct {
	Turn int
	Call openai.MCPCall
}

// SessionStore holds agent sessions: the in-memory MemStore on a single
// node, the Raft state machine in a cluster. Every method is atomic; the
// ones that take effect send one Change to the subscribers. Expired
// sessions are never returned, even before they are reaped.
type SessionStore interface {
	// Create adds a session. At the cap it first removes the least
	// recently accessed inactive session (a Closed change, ReasonEvicted),
	// or answers ErrCapacity when every session is active.
	Create(ctx context.Context, s NewSession) (*Session, error)
	// Get returns a session without renewing it.
	Get(ctx context.Context, id string) (*Session, error)
	// Touch renews a session's TTL and returns it.
	Touch(ctx context.Context, id string) (*Session, error)
	// List returns the live sessions, least recently accessed first.
	List(ctx context.Context) ([]*Session, error)
	// BeginTurn marks a session active and renews it; a session already
	// active answers ErrConflict. The turn number is TurnCount+1 of the
	// returned session.
	BeginTurn(ctx context.Context, id string) (*Session, error)
	// EndTurn appends the turn's messages, counts the turn, clears Active
	// and renews the session.
	EndTurn(ctx context.Context, id string, end TurnEnd) (*Session, error)
	// Edit applies a steering message or tool result and renews the
	// session.
	Edit(ctx context.Context, id string, e Edit) (*Session, error)
	// Destroy removes a session (a Closed change, ReasonDeleted).
	Destroy(ctx context.Context, id string) error
	// Subscribe calls fn with every change, in the order they took
	// effect, until the returned function is called. fn must not block
	// nor call the store.
	Subscribe(fn func(Change)) (unsubscribe func())
}

// Errors stores answer; handlers map them to status codes.
var (
	ErrNotFound         = errors.New("openclaw: session not found")          // 404
	ErrExists           = errors.New("openclaw: session id already in use")  // retry with a new id
	ErrConflict         = errors.New("openclaw: a turn is already running")  // 409
	ErrCapacity         = errors.New("openclaw: session cap reached")        // 429
	ErrUnknownToolCall  = errors.New("openclaw: unknown tool call id")       // 400
	ErrToolCallAnswered = errors.New("openclaw: tool call already answered") // 400
	ErrBadEdit          = errors.New("openclaw: invalid history edit")       // 400
	// ErrUnavailable: the store cannot serve now (a clustered store with
	// no leader within its hold time); the client should retry. 503.
	ErrUnavailable = errors.New("openclaw: the session store is unavailable")
)

// ChangeBetween derives the Change of one applied write from the session
// before and after it, for a store whose notifications carry only the
// new state (the Raft state machine's): before nil is a creation, after
// nil a close for reason. A turn's answer (TurnEnd.Result) is not
// derivable; the streams rebuild it from the appended messages.
func ChangeBetween(before, after *Session, reason string) Change {
	switch {
	case after == nil:
		if before == nil {
			before = &Session{}
		}
		return Change{Kind: Closed, Session: before, Reason: reason}
	case before == nil:
		return Change{Kind: Created, Session: after}
	case !before.Active && after.Active:
		return Change{Kind: TurnBegan, Session: after}
	case before.Active && !after.Active:
		end := &TurnEnd{Turn: before.TurnCount + 1, Failed: after.TurnCount == before.TurnCount}
		if added, ok := appended(before.History, after.History); ok && !end.Failed {
			end.Messages = added
		}
		return Change{Kind: TurnEnded, Session: after, TurnEnd: end}
	case !sameHistory(before.History, after.History):
		e := &Edit{Mode: EditAppend}
		if added, ok := appended(before.History, after.History); ok && len(added) == 1 {
			e.Message = added[0]
			var m struct {
				Role       string `json:"role"`
				ToolCallID string `json:"tool_call_id"`
			}
			if json.Unmarshal(added[0], &m) == nil && m.Role == "tool" {
				e.ToolCallID = m.ToolCallID
			}
		} else if n := len(after.History); n > 0 {
			e.Mode, e.Message = EditReplace, after.History[n-1]
		}
		return Change{Kind: Edited, Session: after, Edit: e}
	}
	return Change{Kind: Touched, Session: after}
}

// appended returns what b adds to a when a is a prefix of b.
func appended(a, b []json.RawMessage) ([]json.RawMessage, bool) {
	if len(b) < len(a) || !sameHistory(a, b[:len(a)]) {
		return nil, false
	}
	return b[len(a):], true
}

func sameHistory(a, b []json.RawMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if string(a[i]) != string(b[i]) {
			return false
		}
	}
	return true
}
