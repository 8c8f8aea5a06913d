// Package clusterpb holds the generated protobuf and gRPC code for the
// cluster: FSM commands and records, and the Cluster service.
package clusterpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative cluster.proto
//go:generate protoc --go_out=. --go_opt=paths=source_relative jobs.proto
//go:generate protoc --go_out=. --go_opt=paths=source_relative profiles.proto
