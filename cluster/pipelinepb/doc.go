// Package pipelinepb holds the generated protobuf and gRPC code of the
// Pipeline service (pipeline.proto): the hidden states between the stages
// of a sharded model. cluster/pipeline wraps it; nothing else should use
// it directly.
package pipelinepb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative pipeline.proto
