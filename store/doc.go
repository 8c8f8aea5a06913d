// Package store owns the node's bbolt files: the raft log and stable store,
// node-local buckets and the SSD cache index.
package store
