package runner

import "golang.org/x/sys/unix"

// totalRAM is the machine's physical memory in bytes (0 if unknown).
func totalRAM() int64 {
	n, err := unix.SysctlUint64("hw.memsize")
	if err != nil {
		return 0
	}
	return int64(n)
}

// freeRAM is not measured on macOS yet (0: unknown).
func freeRAM() int64 { return 0 }
