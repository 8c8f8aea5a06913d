// Package fsm is the fusion cluster's replicated state machine: the node
// catalog, model placements, agent sessions, API-key hashes, settings, the
// background jobs' records and a bounded request-id dedup table.
//
// State.Apply is a pure, deterministic function of (state, command, index):
// no clock, randomness or I/O; every timestamp arrives inside the command
// from the leader. A command is one type byte (bit 7 = ignore if unknown)
// followed by a protobuf payload. FSM adapts State to hashicorp/raft.
package fsm

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "fusion/cluster/clusterpb"
)

// Type is the first byte of a command.
type Type uint8

// IgnoreUnknown marks a command that replicas which do not know its type
// skip instead of stopping (old binaries tolerate new optional commands).
const IgnoreUnknown Type = 0x80

// Command types. Never renumber: they are in raft logs and snapshots.
const (
	TypeNoop              Type = 1
	TypeNodeUpsert        Type = 2
	TypeNodeSetStatus     Type = 3
	TypeNodeDeregister    Type = 4
	TypeNodeSetDraining   Type = 5
	TypePlacementPut      Type = 6
	TypePlacementSetState Type = 7
	TypePlacementDelete   Type = 8
	TypeSessionCreate     Type = 9
	TypeSessionTouch      Type = 10
	TypeSessionTurnBegin  Type = 11
	TypeSessionTurnEnd    Type = 12
	TypeSessionUpdate     Type = 13
	TypeSessionDestroy    Type = 14
	TypeSessionReap       Type = 15
	TypeAPIKeyPut         Type = 16
	TypeAPIKeyRevoke      Type = 17
	TypeSettingPut        Type = 18
	TypeSettingDelete     Type = 19
	TypeNodeSetInventory  Type = 20
	// 30, not 21: other commands being written at the same time take the
	// numbers after 20.
	TypeMCPConfigPut Type = 30
	// The background jobs' records (jobs.proto).
	TypeJobPut        Type = 31
	TypeJobDelete     Type = 32
	TypeJobsInterrupt Type = 33
	// 34 and 35: the admin panel's sessions.
	TypePanelSessionPut Type = 34
	TypePanelSessionEnd Type = 35
	// 36 and 37: the per-model performance profiles (profiles.proto; 38
	// and 39 are kept for them).
	TypeProfilePut    Type = 36
	TypeProfileDelete Type = 37
)

// registry maps a type to a constructor of its payload. It is built once
// and never written.
var registry = map[Type]func() proto.Message{
	TypeNoop:              func() proto.Message { return new(pb.Noop) },
	TypeNodeUpsert:        func() proto.Message { return new(pb.NodeUpsert) },
	TypeNodeSetStatus:     func() proto.Message { return new(pb.NodeSetStatus) },
	TypeNodeDeregister:    func() proto.Message { return new(pb.NodeDeregister) },
	TypeNodeSetDraining:   func() proto.Message { return new(pb.NodeSetDraining) },
	TypePlacementPut:      func() proto.Message { return new(pb.PlacementPut) },
	TypePlacementSetState: func() proto.Message { return new(pb.PlacementSetState) },
	TypePlacementDelete:   func() proto.Message { return new(pb.PlacementDelete) },
	TypeSessionCreate:     func() proto.Message { return new(pb.SessionCreate) },
	TypeSessionTouch:      func() proto.Message { return new(pb.SessionTouch) },
	TypeSessionTurnBegin:  func() proto.Message { return new(pb.SessionTurnBegin) },
	TypeSessionTurnEnd:    func() proto.Message { return new(pb.SessionTurnEnd) },
	TypeSessionUpdate:     func() proto.Message { return new(pb.SessionUpdate) },
	TypeSessionDestroy:    func() proto.Message { return new(pb.SessionDestroy) },
	TypeSessionReap:       func() proto.Message { return new(pb.SessionReap) },
	TypeAPIKeyPut:         func() proto.Message { return new(pb.APIKeyPut) },
	TypeAPIKeyRevoke:      func() proto.Message { return new(pb.APIKeyRevoke) },
	TypeSettingPut:        func() proto.Message { return new(pb.SettingPut) },
	TypeSettingDelete:     func() proto.Message { return new(pb.SettingDelete) },
	TypeNodeSetInventory:  func() proto.Message { return new(pb.NodeSetInventory) },
	TypeMCPConfigPut:      func() proto.Message { return new(pb.MCPConfigPut) },
	TypeJobPut:            func() proto.Message { return new(pb.JobPut) },
	TypeJobDelete:         func() proto.Message { return new(pb.JobDelete) },
	TypeJobsInterrupt:     func() proto.Message { return new(pb.JobsInterrupt) },
	TypePanelSessionPut:   func() proto.Message { return new(pb.PanelSessionPut) },
	TypePanelSessionEnd:   func() proto.Message { return new(pb.PanelSessionEnd) },
	TypeProfilePut:        func() proto.Message { return new(pb.ProfilePut) },
	TypeProfileDelete:     func() proto.Message { return new(pb.ProfileDelete) },
}

// typeOf is the reverse of registry, keyed by message full name.
var typeOf = func() map[protoreflect.FullName]Type {
	m := make(map[protoreflect.FullName]Type, len(registry))
	for t, f := range registry {
		m[f().ProtoReflect().Descriptor().FullName()] = t
	}
	return m
}()

// ErrUnknownType is returned by Decode for a type byte this binary does not
// know; the returned Type tells whether IgnoreUnknown was set.
var ErrUnknownType = errors.New("fsm: unknown command type")

// ErrEmptyCommand is returned by Decode for a zero-length command.
var ErrEmptyCommand = errors.New("fsm: empty command")

// TypeFor returns the command type of a payload message.
func TypeFor(m proto.Message) (Type, bool) {
	t, ok := typeOf[m.ProtoReflect().Descriptor().FullName()]
	return t, ok
}

// Encode returns the raft log bytes of a command payload.
func Encode(m proto.Message) ([]byte, error) {
	t, ok := TypeFor(m)
	if !ok {
		return nil, fmt.Errorf("fsm: %s is not a command", m.ProtoReflect().Descriptor().FullName())
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("fsm: encode %s: %w", m.ProtoReflect().Descriptor().Name(), err)
	}
	return append([]byte{byte(t)}, b...), nil
}

// Decode parses raft log bytes into the command type and its payload.
func Decode(b []byte) (Type, proto.Message, error) {
	if len(b) == 0 {
		return 0, nil, ErrEmptyCommand
	}
	t := Type(b[0])
	f, ok := registry[t&^IgnoreUnknown]
	if !ok {
		return t, nil, fmt.Errorf("%w %d", ErrUnknownType, t)
	}
	m := f()
	if err := proto.Unmarshal(b[1:], m); err != nil {
		return t, nil, fmt.Errorf("fsm: decode type %d: %w", t, err)
	}
	return t &^ IgnoreUnknown, m, nil
}

// RequestID returns a command's request id ("" when it has none).
func RequestID(m proto.Message) string {
	fd := m.ProtoReflect().Descriptor().Fields().ByName("request_id")
	if fd == nil || fd.Kind() != protoreflect.StringKind {
		return ""
	}
	return m.ProtoReflect().Get(fd).String()
}

// SetRequestID sets a command's request id; it reports false when the
// message has no request_id field.
func SetRequestID(m proto.Message, id string) bool {
	fd := m.ProtoReflect().Descriptor().Fields().ByName("request_id")
	if fd == nil || fd.Kind() != protoreflect.StringKind {
		return false
	}
	m.ProtoReflect().Set(fd, protoreflect.ValueOfString(id))
	return true
}
