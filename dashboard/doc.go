// Package dashboard is the admin web UI, embedded into the binary.
package dashboard
