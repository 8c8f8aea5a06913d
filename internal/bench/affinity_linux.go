package bench

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// pinProcess binds every thread of this process to one CPU (threads
// made later inherit it from the thread that makes them) and returns a
// function restoring the former set. Linux's affinity is per thread, so
// each of /proc/self/task is set.
func pinProcess(cpu int) (restore func(), err error) {
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, fmt.Errorf("bench: affinity: %w", err)
	}
	var one unix.CPUSet
	one.Set(cpu)
	if err := setAllThreads(&one); err != nil {
		_ = setAllThreads(&old)
		return nil, err
	}
	return func() { _ = setAllThreads(&old) }, nil
}

func setAllThreads(set *unix.CPUSet) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("bench: affinity: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
			return fmt.Errorf("bench: affinity of thread %d: %w", tid, err)
		}
	}
	return nil
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
