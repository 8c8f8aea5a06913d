//go:build !linux && !darwin

package runner

// totalRAM is the machine's physical memory in bytes (0 if unknown).
func totalRAM() int64 { return 0 }

// freeRAM is the memory free for new work in bytes (0 if unknown).
func freeRAM() int64 { return 0 }
