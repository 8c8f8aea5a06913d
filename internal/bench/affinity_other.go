//go:build !linux

package bench

import "errors"

// pinProcess is Linux-only (sched_setaffinity).
func pinProcess(int) (func(), error) {
	return nil, errors.New("bench: pinning a process to a core needs Linux")
}
