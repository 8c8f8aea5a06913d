// Package enginepb holds the generated protobuf and gRPC code of the
// Engine service (engine.proto): the neutral request and events between
// nodes. cluster/remote wraps it; nothing else should use it directly.
package enginepb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative engine.proto
