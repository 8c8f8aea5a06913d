// Package raftstore keeps OpenClaw agent sessions in the cluster's Raft
// state: an openclaw.SessionStore over a cluster member, so any node
// serves any session, a session outlives the node that created it, and
// every node's streams see every change.
//
// It builds on the cluster package of the wt-cluster branch; until both
// branches are merged its files carry the build constraint "raftstore"
// (go test -tags raftstore ./router/openclaw/raftstore/ once merged).
// Delete those constraint lines when merging.
package raftstore
