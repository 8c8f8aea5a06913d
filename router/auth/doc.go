// Package auth authenticates the HTTP API: the node's admin key and the
// sub-keys (scopes, allowed models, rate limits, expiry) kept as hashes in
// a Store, the per-key rate limiter shared across a cluster, the limit on
// failed attempts per client address, and the /admin/api/subkeys routes.
package auth
