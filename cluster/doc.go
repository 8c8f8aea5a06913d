// Package cluster is a node's membership in a fusion cluster: gossip
// (memberlist) for liveness and addresses, Raft (hashicorp/raft over the
// cluster/fsm state machine, stored by package store) for the node
// catalog, placements, sessions, keys and settings, and the Cluster gRPC
// service that forwards writes to the leader. Member is the entry point;
// DESIGN.md explains the choices.
package cluster
