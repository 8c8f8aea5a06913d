//go:build !linux

package bench

import (
	"errors"
	"time"
)

// pinProcess is Linux-only (sched_setaffinity).
func pinProcess(int) (func(), error) {
	return nil, errors.New("bench: pinning a process to a core needs Linux")
}

// processCPU is Linux-only here (0: unknown).
func processCPU() time.Duration { return 0 }
