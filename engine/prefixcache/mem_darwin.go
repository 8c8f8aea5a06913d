package prefixcache

import "golang.org/x/sys/unix"

// TotalMemory is the machine's RAM in bytes (0 when unknown).
func TotalMemory() uint64 {
	n, err := unix.SysctlUint64("hw.memsize")
	if err != nil {
		return 0
	}
	return n
}
