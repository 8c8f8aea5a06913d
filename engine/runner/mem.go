package runner

// TotalRAM is the machine's physical memory in bytes (0 if unknown).
func TotalRAM() int64 { return totalRAM() }

// FreeRAM is the memory free for new work in bytes (0 if unknown).
func FreeRAM() int64 { return freeRAM() }
