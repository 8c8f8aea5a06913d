package runner

import "golang.org/x/sys/unix"

// totalRAM is the machine's physical memory in bytes (0 if unknown).
func totalRAM() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}

// freeRAM is the memory free for new work in bytes: free plus buffers
// (page cache is not counted; 0 if unknown).
func freeRAM() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(si.Freeram+si.Bufferram) * int64(si.Unit)
}
