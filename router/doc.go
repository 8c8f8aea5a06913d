// Package router is the HTTP frontend: middleware, one sub-package per API
// dialect, and the dispatcher that picks the local engine or a peer.
package router
